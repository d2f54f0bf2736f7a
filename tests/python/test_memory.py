"""10,000 calls leave no memory behind: the functional ops (their cached Operation reused), an
Operation object, torch tensors in and out, and calls that fail."""
import resource

import numpy as np
import pytest
import torch

import cofuse
from conftest import COMM, P, RANK, uniform

CALLS = 10_000


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def growth_kib(call, calls=CALLS):
    for _ in range(500):  # caches, allocator pools and lazy imports settle first
        call()
    before = rss_kib()
    for _ in range(calls):
        call()
    return rss_kib() - before


# A leak of one small array per call (8x4 f32 plus its object, ~200 bytes) would show as ~2 MiB.
LIMIT_KIB = 1024


@pytest.mark.parametrize("form", ["functional numpy", "functional torch", "operation", "operation out=",
                                  "failing call"])
def test_ten_thousand_calls_leave_no_memory_behind(rng, form):
    a = uniform(rng, (8, 4), np.float32)
    b = uniform(rng, (4, 4), np.float32)
    if form == "functional numpy":
        grown = growth_kib(lambda: cofuse.ag_gemm(a, b, COMM, schedule="serial"))
    elif form == "functional torch":
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        grown = growth_kib(lambda: cofuse.ag_gemm(ta, tb, COMM, schedule="serial"))
    elif form == "failing call":
        def fail():
            with pytest.raises(cofuse.Error):
                cofuse.ag_gemm(a, b[:3], COMM, schedule="serial")
        grown = growth_kib(fail)
    else:
        with cofuse.Operation("ag_gemm", 8 * P, 4 * P, 4, COMM, schedule="overlap=chunk,chunks=2") as op:
            out = np.empty((8 * P, 4), np.float32)
            grown = growth_kib((lambda: op(a, b, out=out)) if form == "operation out=" else (lambda: op(a, b)))
    grown = COMM.allreduce(grown, op=__import__("mpi4py").MPI.MAX)
    if RANK == 0:
        print(f"{form}: RSS grew {grown} KiB over {CALLS} calls")
    assert grown < LIMIT_KIB, f"{form}: RSS grew {grown} KiB over {CALLS} calls"

"""A peer that stalls ends the job by the deadline, from Python as from C++. Every rank calls
gemm_rs over and over; after 20 calls the last rank stops itself (SIGSTOP), and the others,
waiting for it, must report the deadline and abort the job (exit 124) within the deadline plus
Open MPI's teardown. Run under mpirun with >= 2 ranks:

  stalled_peer.py call   each call's own deadline: set COFUSE_DEADLINE_S (the CTest: 3 s)
  stalled_peer.py guard  10 calls under the default 600 s deadline, then the rest inside
                         cofuse.deadline(comm, 3): a later, shorter deadline must still fire
"""
import os
import signal
import sys

import numpy as np
from mpi4py import MPI

import cofuse

comm = MPI.COMM_WORLD
P, rank = comm.size, comm.rank
mode = sys.argv[1] if len(sys.argv) > 1 else ""
assert P >= 2 and mode in ("call", "guard"), "run on >= 2 ranks as stalled_peer.py call|guard"
assert (mode == "call") == bool(os.environ.get("COFUSE_DEADLINE_S")), "COFUSE_DEADLINE_S: set for call, not for guard"
rng = np.random.default_rng(rank + 1)
a = rng.random((256, 256 // P)).astype(np.float32)
b = rng.random((256 // P, 256)).astype(np.float32)


def calls(first, last):
    for call in range(first, last):
        if call == 20 and rank == P - 1:
            print(f"rank {rank} stops itself after {call} calls", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
        cofuse.gemm_rs(a, b, comm, schedule="hetero-unfused-1d")


if mode == "call":
    calls(0, 1_000_000)
else:
    calls(0, 10)
    with cofuse.deadline(comm, 3, "the stalled-peer test's loop"):
        calls(10, 1_000_000)
print("FAIL: the calls went on past a stalled peer", flush=True)

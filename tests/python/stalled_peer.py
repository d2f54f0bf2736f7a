"""A peer that stalls ends the job by the deadline, from Python as from C++. Every rank calls
gemm_rs over and over; after a few calls the last rank stops itself (SIGSTOP), and the others,
waiting for it inside a call, must report the deadline and abort the job (exit 124) within
COFUSE_DEADLINE_S plus Open MPI's teardown. Run under mpirun with >= 2 ranks and
COFUSE_DEADLINE_S set (the CTest uses 3 s)."""
import os
import signal

import numpy as np
from mpi4py import MPI

import cofuse

comm = MPI.COMM_WORLD
P, rank = comm.size, comm.rank
assert P >= 2 and os.environ.get("COFUSE_DEADLINE_S"), "run on >= 2 ranks with COFUSE_DEADLINE_S set"
rng = np.random.default_rng(rank + 1)
a = rng.random((256, 256 // P)).astype(np.float32)
b = rng.random((256 // P, 256)).astype(np.float32)
for call in range(1_000_000):
    if call == 20 and rank == P - 1:
        print(f"rank {rank} stops itself after {call} calls", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
    cofuse.gemm_rs(a, b, comm, schedule="hetero-unfused-1d")
print("FAIL: the calls went on past a stalled peer", flush=True)

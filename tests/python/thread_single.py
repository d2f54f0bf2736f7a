"""Under mpi4py.rc.thread_level = "single" (MPI below MPI_THREAD_SERIALIZED) cofuse still runs:
"auto" plans only among schedules the calling thread drives, a schedule that needs a progress
thread is refused with a clear error on every rank, and the ranks stay in step. Run under
mpirun; prints "thread level single OK" last."""
import mpi4py

mpi4py.rc.thread_level = "single"
from mpi4py import MPI  # noqa: E402

import numpy as np  # noqa: E402

import cofuse  # noqa: E402

comm = MPI.COMM_WORLD
P, rank = comm.size, comm.rank
assert MPI.Query_thread() < MPI.THREAD_SERIALIZED, MPI.Query_thread()
rng = np.random.default_rng(comm.bcast(int(np.random.SeedSequence().entropy % (1 << 31))))
# A shape where overlap pays on the shipped TCP profile, so that "auto" would pick a threaded
# schedule if it were allowed to.
m, n, k = 512 * P, 512 * P, 512
a_all = (rng.random((m, k)) * 2 - 1).astype(np.float32)
b_all = (rng.random((k, n)) * 2 - 1).astype(np.float32)
a = a_all[rank * m // P:(rank + 1) * m // P]
b = np.ascontiguousarray(b_all[:, rank * n // P:(rank + 1) * n // P])
want = a_all.astype(np.float64) @ b_all[:, rank * n // P:(rank + 1) * n // P].astype(np.float64)

with cofuse.Operation("ag_gemm", m, n, k, comm, profile="this-host-tcp-2gbit") as op:
    c = op(a, b)
    error = np.linalg.norm(c - want) / np.linalg.norm(want)
    assert error < 1e-4, error
    chosen = op.schedule
assert "engine=thread" not in chosen, chosen
why = cofuse.plan("ag_gemm", m, n, k, P, profile="this-host-tcp-2gbit")["why"]
assert "progress thread" not in why, why  # plan() runs no MPI: it is not limited

try:
    cofuse.ag_gemm(a, b, comm, schedule="overlap=chunk,chunks=4")
    raise AssertionError("a threaded schedule ran below MPI_THREAD_SERIALIZED")
except cofuse.Error as e:
    assert "MPI_THREAD_SERIALIZED" in str(e), str(e)
c = cofuse.ag_gemm(a, b, comm, schedule="serial")  # still in step
assert np.linalg.norm(c - want) / np.linalg.norm(want) < 1e-4
comm.Barrier()
if rank == 0:
    print(f"thread level single OK: auto chose {chosen} on {P} ranks")

"""Under mpi4py.rc.thread_level = "single" (MPI below MPI_THREAD_SERIALIZED) cofuse still runs:
"auto" plans only among schedules the calling thread drives, a schedule that needs a progress
thread is refused with a clear error on every rank, the ranks stay in step, a started call
(async_op) runs whole and the layers' backward trains. Run under
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

# A started call with no progress thread runs whole in start(); the communicator is still the
# call's until wait(), as for one in flight; the layers' backward (which starts its input
# gradient's reduction) trains as before.
work = cofuse.ag_gemm(a, b, comm, schedule="serial", async_op=True)
try:
    cofuse.ag_gemm(a, b, comm, schedule="serial")
    raise AssertionError("a call ran while a started one had not finished")
except cofuse.Error as e:
    assert "was started on this communicator and has not finished" in str(e), str(e)
c = work.wait()
assert np.linalg.norm(c - want) / np.linalg.norm(want) < 1e-4
import torch  # noqa: E402
import cofuse.torch as ct  # noqa: E402

layer = ct.ColumnParallelLinear(64, 32 * P, comm, schedule="auto", seed=5)
x = torch.from_numpy((rng.random((16, 64)) * 2 - 1).astype(np.float32)).requires_grad_()
for _ in range(3):
    layer(x).sum().backward()
layer_whole = ct.ColumnParallelLinear(64, 32 * P, comm, schedule="serial", seed=5)
dx = x.grad.clone() / 3
x.grad = None
layer_whole(x).sum().backward()
assert torch.allclose(dx, x.grad, rtol=1e-5, atol=1e-5), (dx - x.grad).abs().max()
comm.Barrier()
if rank == 0:
    print(f"thread level single OK: auto chose {chosen} on {P} ranks")

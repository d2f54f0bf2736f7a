"""Bad input raises cofuse.Error on EVERY rank, with cofuse's message, and leaves the ranks in
step: after each failure the same ranks run a good op together (a rank left behind in a
collective would hang it, and the per-test deadline would abort the job instead)."""
import os

import numpy as np
import pytest
import torch

import cofuse
from conftest import COMM, P, RANK, SEED, assert_close, uniform

LAST = P - 1


def good_ag_gemm(_):
    """A small correct ag_gemm on every rank: proves the ranks are still in step. (Its own
    generator: the test's may have drawn different shapes on different ranks.)"""
    rng = np.random.default_rng(SEED)
    a_all = uniform(rng, (4 * P, 8), np.float64)
    b = uniform(rng, (8, 3), np.float64)
    c = cofuse.ag_gemm(a_all[4 * RANK:4 * RANK + 4], b, COMM, schedule="serial")
    assert_close(c, a_all @ b, 8, np.float64)


def raises_everywhere(rng, call, *fragments, code="invalid_argument"):
    with pytest.raises(cofuse.Error) as caught:
        call()
    for fragment in fragments:
        assert fragment in str(caught.value), str(caught.value)
    assert code is None or caught.value.code == code, caught.value.code
    good_ag_gemm(rng)
    return str(caught.value)


def operands(rng, dtype=np.float32):
    return uniform(rng, (4, 8), dtype), uniform(rng, (8, 3), dtype)


def test_a_wrong_dtype_on_one_rank(rng):
    a, b = operands(rng)
    if RANK == LAST:
        b = b.astype(np.float64)
    raises_everywhere(rng, lambda: cofuse.ag_gemm(a, b, COMM), f"rank {LAST}: ", "both operands must have one dtype")


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_dtypes_cofuse_does_not_run(rng, kind):
    a, b = operands(rng)
    if kind == "numpy":
        a16, b16 = a.astype(np.float16), b.astype(np.float16)
        raises_everywhere(rng, lambda: cofuse.ag_gemm(a16, b16, COMM), "float32, float64 or bfloat16", "float16 runs on GPUs")
        ints = np.ones((4, 8), dtype=np.int32)
        raises_everywhere(rng, lambda: cofuse.ag_gemm(ints, b, COMM), "element format")
    else:
        a16, b16 = torch.from_numpy(a).to(torch.float16), torch.from_numpy(b).to(torch.float16)
        raises_everywhere(rng, lambda: cofuse.ag_gemm(a16, b16, COMM), "torch.float16",
                          "torch.float32, torch.float64 or torch.bfloat16")


def test_not_a_matrix(rng):
    a, b = operands(rng)
    raises_everywhere(rng, lambda: cofuse.gemm_ar(a.ravel(), b, COMM), "must be 2-D", "(32,)")
    raises_everywhere(rng, lambda: cofuse.gemm_ar([[1.0, 2.0]], b, COMM), "numpy array or a torch CPU tensor")


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_non_contiguous_operands(rng, kind):
    a, b = operands(rng)
    wide = uniform(rng, (4, 16), np.float32)
    strided = wide[:, ::2]  # [4, 8], every other column
    transposed = np.ascontiguousarray(a.T).T  # [4, 8], column-major
    for bad in (strided, transposed):
        arg = bad if kind == "numpy" else torch.from_numpy(bad)
        raises_everywhere(rng, lambda: cofuse.ag_gemm(arg, b, COMM), "contiguous", "never copies")


def test_a_tensor_off_the_cpu(rng):
    # The "meta" device stands for a GPU here: any tensor not on the CPU is refused by name.
    a, b = operands(rng)
    on_meta = torch.empty(4, 8, device="meta")
    raises_everywhere(rng, lambda: cofuse.ag_gemm(on_meta, torch.from_numpy(b), COMM), "a is on meta",
                      "CPU tensors only")


def on_the_last_rank(good, bad):
    """The last rank's argument is bad, the others' good (at one rank, that rank's is bad)."""
    return bad if RANK == LAST else good


# One rank's unusable argument (each docs/python.md names) against the others' good ones: every
# rank raises cofuse.Error with the last rank's problem and its rank, for the functional form
# (whose agreement carries the problem) and cofuse.Operation (whose call's preflight does), and
# nobody is left in a collective (raises_everywhere runs a good op after it).
BAD_ARGUMENTS = {
    # what is wrong: (the bad (a, b, out, gathered) from good numpy ones, words of the message)
    "a on meta": (lambda a, b, out, g: (torch.empty(a.shape, device="meta"), b, out, g), "a is on meta"),
    "out on meta": (lambda a, b, out, g: (a, b, torch.empty(out.shape, device="meta"), g), "out is on meta"),
    "a strided": (lambda a, b, out, g: (np.repeat(a, 2, axis=1)[:, ::2], b, out, g), "a is not C-contiguous"),
    "b transposed": (lambda a, b, out, g: (a, np.ascontiguousarray(b.T).T, out, g), "b is not C-contiguous"),
    "torch a strided": (lambda a, b, out, g: (torch.from_numpy(np.repeat(a, 2, axis=1))[:, ::2], b, out, g),
                        "a is not C-contiguous"),
    "out strided": (lambda a, b, out, g: (a, b, np.repeat(out, 2, axis=1)[:, ::2], g), "out is not C-contiguous"),
    "out read-only": (lambda a, b, out, g: (a, b, read_only(out), g), "out is read-only"),
    "gathered read-only": (lambda a, b, out, g: (a, b, out, read_only(g)), "gathered is read-only"),
}


def read_only(x):
    x = x.copy()
    x.flags.writeable = False
    return x


@pytest.mark.parametrize("form", ["functional", "Operation"])
@pytest.mark.parametrize("what", list(BAD_ARGUMENTS))
def test_an_unusable_argument_on_one_rank_fails_every_rank(rng, form, what):
    make_bad, words = BAD_ARGUMENTS[what]
    a, b = uniform(rng, (4, 8), np.float32), uniform(rng, (8, 3), np.float32)  # ag_gemm: M = 4 P, N = 3 P, K = 8
    out, gathered = np.zeros((4 * P, 3), np.float32), np.zeros((4 * P, 8), np.float32)
    args = on_the_last_rank((a, b, out, gathered), make_bad(a, b, out, gathered))
    if form == "functional":
        call = lambda: cofuse.ag_gemm(args[0], args[1], COMM, schedule="serial", out=args[2], gathered=args[3])
        raises_everywhere(rng, call, words, f"rank {LAST}")
    else:
        with cofuse.Operation("ag_gemm", 4 * P, 3 * P, 8, COMM, schedule="overlap=chunk,chunks=2") as op:
            raises_everywhere(rng, lambda: op(args[0], args[1], out=args[2], gathered=args[3]), words, f"rank {LAST}")
            c = op(a, b, out=out, gathered=gathered)  # still usable, and right, after the failed call
            whole = np.concatenate(COMM.allgather(a))
            assert c is out
            assert_close(gathered, whole, 8, np.float32)
            assert_close(c, whole.astype(np.float64) @ b, 8, np.float32)


def test_shapes_that_do_not_fit(rng):
    a, b = operands(rng)
    raises_everywhere(rng, lambda: cofuse.ag_gemm(a, b[:5], COMM), "op(b) must have K", "docs/ops.md")
    raises_everywhere(rng, lambda: cofuse.ag_gemm(a, b, COMM, trans_b=True), "op(b) is [3, 8]")
    # gemm_rs: op(a) [M, K/P], op(b) [K/P, N]; M must split into P row blocks.
    if P > 1:
        odd = uniform(rng, (P * 2 + 1, 8), np.float32)
        raises_everywhere(rng, lambda: cofuse.gemm_rs(odd, b, COMM), "divisible")
    out = np.empty((5, 5), np.float32)
    raises_everywhere(rng, lambda: cofuse.ag_gemm(a, b, COMM, out=out), "out is [5, 5]")


def test_ranks_that_disagree(rng):
    if P == 1:
        pytest.skip("needs two ranks")
    rows = 6 if RANK == LAST else 4  # the last rank thinks M is larger
    a, b = uniform(rng, (rows, 8), np.float32), uniform(rng, (8, 3), np.float32)
    text = raises_everywhere(rng, lambda: cofuse.ag_gemm(a, b, COMM, schedule="serial"), "disagree",
                             code="mismatch")
    assert f"rank {LAST}" in text or f"ranks {LAST}" in text or f"-{LAST}" in text, text
    # And a different schedule on one rank.
    a, b = operands(rng)
    schedule = "overlap=chunk,chunks=2" if RANK == 0 else "serial"
    raises_everywhere(rng, lambda: cofuse.ag_gemm(a, b, COMM, schedule=schedule), "disagree", code="mismatch")


def test_names_that_do_not_exist(rng):
    a, b = operands(rng)
    raises_everywhere(rng, lambda: cofuse.ag_gemm(a, b, COMM, profile="no-such-profile"), "no-such-profile",
                      code="io")
    raises_everywhere(rng, lambda: cofuse.ag_gemm(a, b, COMM, axis="q"), "unknown axis 'q'")
    raises_everywhere(rng, lambda: cofuse.ag_gemm(a, b, COMM, axis="n"), "axis m or k")
    raises_everywhere(rng, lambda: cofuse.ag_gemm(a, b, COMM, schedule="overlap=sometimes"), "overlap")
    raises_everywhere(rng, lambda: cofuse.Operation("gemm_xy", 8, 8, 8, COMM), "unknown op 'gemm_xy'")
    raises_everywhere(rng, lambda: cofuse.Operation("ag_gemm", 8 * P, 8, 8, COMM, dtype="int8"), "unknown dtype")
    raises_everywhere(rng, lambda: cofuse.plan("ag_gemm", 8, 8, 8, 2, profile="no-such-profile"), "no-such-profile",
                      code="io")
    raises_everywhere(rng, lambda: cofuse.simulate("ag_gemm", 8, 8, 8, 0), "ranks must be at least 1")


def test_profile_errors_name_the_profile_kind(rng):
    # A profile file that is not JSON is a clear error too.
    a, b = operands(rng)
    path = f"/tmp/cofuse-python-bad-profile-{SEED}.json"  # one name on every rank: they must agree on it
    if RANK == 0:
        with open(path, "w") as f:
            f.write("{ not json")
    COMM.Barrier()
    raises_everywhere(rng, lambda: cofuse.ag_gemm(a, b, COMM, profile=path), path, code=None)
    COMM.Barrier()
    if RANK == 0:
        os.remove(path)


def test_outputs_cofuse_cannot_write(rng):
    a, b = operands(rng)
    out = np.empty((4 * P, 3), np.float32)
    out.flags.writeable = False
    raises_everywhere(rng, lambda: cofuse.ag_gemm(a, b, COMM, out=out), "read-only")
    wrong = np.empty((4 * P, 3), np.float64)
    raises_everywhere(rng, lambda: cofuse.ag_gemm(a, b, COMM, out=wrong), "out is float64")


def test_not_a_communicator(rng):
    a, b = operands(rng)
    raises_everywhere(rng, lambda: cofuse.ag_gemm(a, b, 42), "mpi4py.MPI.Comm", "int")
    from mpi4py import MPI
    raises_everywhere(rng, lambda: cofuse.ag_gemm(a, b, MPI.COMM_NULL), "COMM_NULL")


def test_operation_misuse(rng):
    with cofuse.Operation("gemm_rs", 4 * P, 3, 8 * P, COMM, schedule="serial") as op:
        a, b = uniform(rng, (4 * P, 8), np.float32), uniform(rng, (8, 3), np.float32)
        raises_everywhere(rng, lambda: op(a, b, gathered=True), "gemm_rs has none")
        raises_everywhere(rng, lambda: op(a[:2], b), f"a is [2, 8] but this op needs [{4 * P}, 8]", "on each rank")
        raises_everywhere(rng, lambda: op(a.astype(np.float64), b.astype(np.float64)), "a is float64 but the op is float32")
        op(a, b)  # still usable after its callers' mistakes
    assert op.closed
    with pytest.raises(cofuse.Error, match="released"):
        op(a, b)
    with pytest.raises(cofuse.Error, match="released"):
        op.schedule
    if P > 1:  # global sizes that do not split over the ranks
        raises_everywhere(rng, lambda: cofuse.Operation("ag_gemm", 4 * P + 1, 8, 8, COMM), "divisible")


def test_a_functional_op_has_no_gathered_for_gemm_rs(rng):
    a, b = operands(rng)
    with pytest.raises(TypeError):
        cofuse.gemm_rs(a, b, COMM, gathered=True)
    good_ag_gemm(rng)


def test_an_operation_whose_ranks_disagree(rng):
    if P == 1:
        pytest.skip("needs two ranks")
    # Another schedule, or a profile named on one rank only, fails every rank before anything
    # is planned or calibrated (which would leave the ranks in different collectives).
    schedule = "serial" if RANK == 0 else "auto"
    raises_everywhere(rng, lambda: cofuse.Operation("ag_gemm", 4 * P, 3 * P, 8, COMM, schedule=schedule), "disagree",
                      "schedule and profile", code="mismatch")
    profile = "this-host-shm" if RANK == LAST else None
    raises_everywhere(rng, lambda: cofuse.Operation("ag_gemm", 4 * P, 3 * P, 8, COMM, profile=profile), "disagree",
                      code="mismatch")


def test_a_freed_communicator_releases_its_ops(rng):
    # mpi4py frees a communicator with the GIL released: what cofuse kept on it goes then.
    sub = COMM.Split(0, RANK)
    a, b = operands(rng)
    cofuse.ag_gemm(a, b, sub, schedule="overlap=chunk,chunks=2")  # a functional op kept on sub
    op = cofuse.Operation("gemm_ar", 4, 3, 8 * P, sub, schedule="serial")
    assert len(cofuse.operations(sub)) == 1
    sub.Free()
    with pytest.raises(cofuse.Error, match="its communicator was freed"):
        op(uniform(rng, (4, 8), np.float32), uniform(rng, (8, 3), np.float32))
    good_ag_gemm(rng)

"""Every op, axis and transpose, with numpy and with torch, against a float64 numpy reference
on the whole matrices (every rank draws them alike and keeps its shards)."""
import itertools
import time

import numpy as np
import pytest
import torch

import cofuse
from conftest import P, RANK, assert_close, uniform

LAYOUTS = [("ag_gemm", "m"), ("ag_gemm", "k"), ("gemm_rs", "m"), ("gemm_rs", "n"), ("gemm_ar", None)]


def block(x, axis, parts=P, index=RANK):
    return np.ascontiguousarray(np.split(x, parts, axis=axis)[index])


def stored(x, trans):
    """How a rank stores op(X) = x: x itself, or its transpose (contiguous)."""
    return np.ascontiguousarray(x.T) if trans else np.ascontiguousarray(x)


def case(rng, op, axis, dtype, sizes=None):
    """Awkward global sizes that divide P (or `sizes`, (m, n, k)), the whole operands, this rank's
    op(A_r), op(B_r) and the expected C_r (float64)."""
    m, n, k = (P * int(rng.integers(1, 6)) + 0 for _ in range(3))
    m, n, k = sizes or (m * 3, n * 5, k * 7)  # odd, and not powers of two
    A, B = uniform(rng, (m, k), dtype), uniform(rng, (k, n), dtype)
    C = A.astype(np.float64) @ B.astype(np.float64)
    if op == "ag_gemm" and axis == "m":
        return block(A, 0), block(B, 1), block(C, 1), k
    if op == "ag_gemm":  # axis k: op(A_r) = columns block r of A
        return block(A, 1), block(B, 1), block(C, 1), k
    a, b = block(A, 1), block(B, 0)
    if op == "gemm_rs":
        return a, b, block(C, 0 if axis == "m" else 1), k
    return a, b, C, k


def run(kind, op, axis, a, b, trans_a, trans_b, schedule, comm):
    a, b = stored(a, trans_a), stored(b, trans_b)
    if kind == "torch":
        a, b = torch.from_numpy(a), torch.from_numpy(b)
    f = getattr(cofuse, op)
    kwargs = dict(trans_a=trans_a, trans_b=trans_b, schedule=schedule)
    if axis:
        kwargs["axis"] = axis
    c = f(a, b, comm, **kwargs)
    assert isinstance(c, torch.Tensor if kind == "torch" else np.ndarray)
    return c


@pytest.mark.parametrize("op,axis", LAYOUTS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_every_layout_and_transpose(comm, rng, op, axis, dtype, kind):
    for trans_a, trans_b in itertools.product([False, True], repeat=2):
        a, b, want, k = case(rng, op, axis, dtype)
        for schedule in ["serial", "overlap=chunk,chunks=2,split=1d,data=hetero,fusion=unfused"]:
            c = run(kind, op, axis, a, b, trans_a, trans_b, schedule, comm)
            assert c.dtype == (torch.float32 if dtype == np.float32 else torch.float64) if kind == "torch" else c.dtype == dtype
            assert_close(c, want, k, dtype)


@pytest.mark.parametrize("op,axis", LAYOUTS)
def test_bfloat16_tensors(comm, rng, op, axis):
    """torch.bfloat16 in, torch.bfloat16 out (oneDNN GEMMs, sums in float32 rounded once), within
    cofuse's bf16 tolerance of a float64 product of the same bf16 values."""
    for trans_a, trans_b in itertools.product([False, True], repeat=2):
        a, b, _, k = case(rng, op, axis, np.float32)
        a16 = torch.from_numpy(stored(a, trans_a)).to(torch.bfloat16)
        b16 = torch.from_numpy(stored(b, trans_b)).to(torch.bfloat16)
        a64, b64 = a16.double().numpy(), b16.double().numpy()
        a64, b64 = (a64.T if trans_a else a64), (b64.T if trans_b else b64)
        # the expected C_r from the rounded operands: every rank holds its shards, so gather them
        full_a = np.concatenate(comm.allgather(a64), axis=0 if (op, axis) == ("ag_gemm", "m") else 1)
        full_b = np.concatenate(comm.allgather(b64), axis=1 if op == "ag_gemm" else 0)
        if op == "ag_gemm":  # C_r = op(A) · op(B_r), op(A) gathered along its rows (m) or columns (k)
            want = full_a @ b64
        else:
            total = full_a @ full_b
            want = total if op == "gemm_ar" else block(total, 0 if axis == "m" else 1)
        # partial sums in bf16, and (reductions only) in float32 until each block is summed
        for schedule in ["hetero-unfused-1d"] + ([] if op == "ag_gemm" else ["hetero-unfused-1d,wire=f32"]):
            kwargs = dict(trans_a=trans_a, trans_b=trans_b, schedule=schedule)
            if axis:
                kwargs["axis"] = axis
            c = getattr(cofuse, op)(a16, b16, comm, **kwargs)
            assert c.dtype is torch.bfloat16
            got = c.double().numpy()
            error = np.linalg.norm(got - want) / np.linalg.norm(want)
            bound = 8 * np.finfo(np.float32).eps * (np.sqrt(k) + 4) + 2.0 ** -7  # op_desc.hpp's tolerance(bf16, k)
            assert error <= bound, f"{op} axis {axis} trans {trans_a},{trans_b} {schedule}: error {error:.3g} > {bound:.3g}"


@pytest.mark.parametrize("op,axis", LAYOUTS)
def test_auto_is_correct(comm, rng, op, axis):
    a, b, want, k = case(rng, op, axis, np.float32)
    assert_close(run("numpy", op, axis, a, b, False, False, "auto", comm), want, k, np.float32)


def test_out_is_written_in_place(comm, rng):
    for kind in ["numpy", "torch"]:
        a, b, want, k = case(rng, "gemm_ar", None, np.float64)
        out = np.full(want.shape, np.nan)
        if kind == "torch":
            a, b, out = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(out)
        c = cofuse.gemm_ar(a, b, comm, out=out, schedule="serial")
        assert c is out
        assert_close(out, want, k, np.float64)


def test_gathered_operand(comm, rng):
    a, b, want, k = case(rng, "ag_gemm", "m", np.float32)
    whole_a = np.concatenate(comm.allgather(a))
    c, gathered = cofuse.ag_gemm(a, b, comm, gathered=True, schedule="serial")
    assert_close(c, want, k, np.float32)
    assert np.array_equal(gathered, whole_a)
    into = np.zeros_like(whole_a)
    c = cofuse.ag_gemm(torch.from_numpy(a), torch.from_numpy(b), comm, gathered=into, schedule="serial")
    assert isinstance(c, torch.Tensor) and np.array_equal(into, whole_a)


@pytest.mark.parametrize("op,axis", LAYOUTS)
@pytest.mark.parametrize("schedule", ["serial", "overlap=chunk,chunks=2,fusion=fused,engine=inline", "auto"])
def test_async_op_returns_a_work_that_waits(comm, rng, op, axis, schedule):
    """async_op=True: the caller computes between the start and wait(); the result is the call's.
    While it is in flight another cofuse call raises, on the rank that makes it (no collective
    is entered); its communication completes without wait() (communication_done, polled within a
    bound: no message needs what wait() runs); wait() again returns the same; a Work dropped
    unwaited still finishes its call."""
    for kind in ["numpy", "torch"]:
        a, b, want, k = case(rng, op, axis, np.float32)
        if kind == "torch":
            a, b = torch.from_numpy(a), torch.from_numpy(b)
        kwargs = dict(schedule=schedule, async_op=True)
        if axis:
            kwargs["axis"] = axis
        f = getattr(cofuse, op)
        work = f(a, b, comm, **kwargs)
        assert isinstance(work, cofuse.Work) and not work.waited
        x = uniform(rng, (48, 48), np.float64)
        mine = x @ x  # the caller's own work meanwhile
        with pytest.raises(cofuse.Error, match="was started on this communicator and has not finished"):
            cofuse.gemm_ar(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), comm, schedule="serial")
        until = time.monotonic() + 60
        while not work.communication_done() and time.monotonic() < until:
            time.sleep(1e-4)
        assert work.communication_done(), "a message waits for what wait() runs"
        c = work.wait()
        assert work.waited and work.wait() is c and work.communication_done()
        assert isinstance(c, torch.Tensor if kind == "torch" else np.ndarray)
        assert_close(c, want, k, np.float32)
        np.testing.assert_allclose(mine, x @ x)
    del work
    f(a, b, comm, **kwargs)  # never waited: dropped, it finishes its call; the communicator is free again
    assert_close(f(a, b, comm, schedule=schedule, **({"axis": axis} if axis else {})), want, k, np.float32)


@pytest.mark.parametrize("op,axis", LAYOUTS)
def test_operation_object(comm, rng, op, axis):
    a, b, want, k = case(rng, op, axis, np.float64)
    m = want.shape[0] * (P if op == "gemm_rs" and axis == "m" else 1)
    n = want.shape[1] * (P if op == "ag_gemm" or axis == "n" else 1)
    with cofuse.Operation(op, m, n, k, comm, dtype="float64", axis=axis, schedule="serial") as operation:
        assert operation.local_shapes["a"] == a.shape and operation.local_shapes["out"] == want.shape
        for _ in range(3):
            c = operation(a, b)
            assert_close(c, want, k, np.float64)
        stats = operation.last_stats
        assert stats["total_ms"] > 0 and stats["total_ms"] >= stats["gemm_ms"] > 0
        assert operation.schedule_name == "serial" and operation.decided_by == "given"
        assert operation.predicted_ms is None and "given by the caller" in operation.explain()
        out = torch.empty(tuple(want.shape), dtype=torch.float64)
        assert operation(torch.from_numpy(a), torch.from_numpy(b), out=out) is out
        assert_close(out, want, k, np.float64)
    assert operation.closed
    with pytest.raises(cofuse.Error, match="released"):
        operation(a, b)


@pytest.mark.parametrize("op,axis", LAYOUTS)
@pytest.mark.parametrize("schedule", ["serial", "overlap=chunk,chunks=2,algo=ring", "auto"])
def test_operation_bound_calls(comm, rng, op, axis, schedule):
    """bind() agrees once; op() then runs on the bound operands with no agreement: fresh data
    written into them in place between calls (numpy, and torch with gathered=True for ag_gemm),
    each result checked against the reference with out poisoned first. A call without operands
    before any bind, and after a bind one rank failed, raises on every rank; a later bind
    replaces the set."""
    a, b, want, k = case(rng, op, axis, np.float64)
    m = want.shape[0] * (P if op == "gemm_rs" and axis == "m" else 1)
    n = want.shape[1] * (P if op == "ag_gemm" or axis == "n" else 1)
    with cofuse.Operation(op, m, n, k, comm, dtype="float64", axis=axis, schedule=schedule,
                          profile="this-host-shm") as operation:
        with pytest.raises(cofuse.Error, match="needs bind"):
            operation()
        a_bound, b_bound = np.empty_like(a), np.empty_like(b)
        out = operation.bind(a_bound, b_bound)
        for _ in range(4):  # enough for auto to race on bound buffers and settle
            a2, b2, want2, _ = case(rng, op, axis, np.float64, (m, n, k))
            a_bound[...], b_bound[...] = a2, b2
            out[...] = np.nan
            assert operation() is out
            assert_close(out, want2, k, np.float64)
        # torch, and ag_gemm's gathered operand kept too
        ta, tb = torch.from_numpy(a.copy()), torch.from_numpy(b.copy())
        kwargs = {"gathered": True} if op == "ag_gemm" else {}
        bound = operation.bind(ta, tb, **kwargs)
        got = operation()
        assert got is bound
        c = got[0] if op == "ag_gemm" else got
        assert isinstance(c, torch.Tensor)
        assert_close(c, want, k, np.float64)
        # a bad operand on one rank fails the bind on every rank, and nothing stays bound
        wrong = np.empty((a.shape[0] + (1 if RANK == P - 1 else 0), a.shape[1]))
        with pytest.raises(cofuse.Error, match="a is" if RANK == P - 1 else "rank"):
            operation.bind(wrong, b_bound)
        with pytest.raises(cofuse.Error, match="needs bind"):
            operation()


def test_operation_auto_explains_and_predicts(comm):
    with cofuse.Operation("gemm_rs", 64 * P, 96, 32 * P, comm, profile="this-host-shm") as operation:
        assert operation.predicted_ms > 0
        assert operation.decided_by in ("model", "database", "tuning", "measurement")
        assert "this-host-shm" in operation.explain()
    fixed = cofuse.Operation("gemm_rs", 64 * P, 96, 32 * P, comm, schedule="serial", profile="this-host-shm")
    assert fixed.predicted_ms > 0 and "this-host-shm" in fixed.explain()
    fixed.close()


def test_plan_and_simulate_match_the_cli():
    p = cofuse.plan("ag_gemm", 1024, 1024, 1024, 4, profile="this-host-shm", top=3)
    assert p["profile"] == "this-host-shm" and p["choice"] and p["why"]
    assert p["serial_ms"] > 0 and any(c["name"] == "serial" for c in p["candidates"])
    # the top 3, the choice, and the three unfused baselines (serial, serial-ring, serial,algo=direct)
    assert len(p["candidates"]) <= 3 + 1 + 3
    assert {"serial", "serial-ring"} <= {c["name"] for c in p["candidates"]}
    tasks = cofuse.plan("gemm_rs", 64, 64, 64, 2, schedule="hetero-unfused-1d", rank=1)
    assert tasks["schedule_name"] == "hetero-unfused-1d" and "gemm" in tasks["plan"]
    s = cofuse.simulate("gemm_ar", 1024, 1024, 1024, 4, schedule="hetero-unfused-1d", profile="this-host-shm")
    assert s["makespan_ms"] > 0 and s["backend_runs_it"] and set(s["losses_ms"]) >= {"dil", "cil", "exposed_comm"}
    with pytest.raises(cofuse.Error, match="not divisible"):
        cofuse.plan("ag_gemm", 130, 64, 64, 4)

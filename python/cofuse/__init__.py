"""cofuse: fused AllGather+GEMM, GEMM+ReduceScatter and GEMM+AllReduce for tensor-parallel
layers, with schedules you can read, predict and measure. docs/python.md has all of it.

Every op is COLLECTIVE over its mpi4py communicator: every rank calls it, in the same order.
A bad argument on any rank raises cofuse.Error on every rank (the failing rank's message,
prefixed "rank R: "), never a hang; a peer that stalls ends the job at the deadline
($COFUSE_DEADLINE_S, default 600 s), as in C++. What the C++ core warns about (a tuning
database that could not be written, say) arrives as a cofuse.CofuseWarning; info and debug
records ($COFUSE_LOG) go to the logging logger "cofuse.<subsystem>".
"""
import atexit as _atexit
import json as _json

# mpi4py initialises MPI when its MPI module is imported (MPI_THREAD_MULTIPLE unless
# mpi4py.rc.thread_level says otherwise); cofuse never initialises MPI itself.
from mpi4py import MPI as _MPI  # noqa: F401

from . import _cofuse
from ._arrays import dtype_name as _dtype_name
from ._arrays import is_tensor as _is_tensor
from ._arrays import to_buffer as _to_buffer
from ._arrays import wrap as _wrap
from ._cofuse import CofuseWarning, Error

__version__ = _cofuse.__version__
__all__ = ["ag_gemm", "gemm_rs", "gemm_ar", "Work", "Operation", "plan", "simulate", "deadline", "operations", "Error", "CofuseWarning"]

# Operations still alive when the interpreter exits are destroyed while MPI can still free what
# they hold: this hook runs before mpi4py finalises MPI.
_atexit.register(_cofuse.release_all)


def _gathered_arg(gathered):
    return gathered if gathered is None or isinstance(gathered, bool) else _to_buffer(gathered, "gathered")


def _results(result, torch_like, out, gathered):
    if gathered is True:
        return _wrap(result[0], torch_like, out), _wrap(result[1], torch_like, None)
    return _wrap(result, torch_like, out)


class Work:
    """A started op (async_op=True): the GEMMs it could run are done, its communication is in
    flight on its progress thread. wait() (collective, as the call is) waits for it, runs what
    only consumes data still arriving (an ag_gemm's last pieces, a gemm_rs's last reduction),
    and returns what the call would have returned; later wait()s return the same. Until wait()
    returns, the results are not written, the operands must not change, and no other cofuse call
    may run on the communicator (each raises cofuse.Error naming the started call). A Work
    dropped unwaited waits then. communication_done() (not collective, cheap) tells whether the
    communication has completed: a caller with several pieces of work of its own can run them
    while it is False and keep the rest for later."""

    def __init__(self, work, torch_like, out, gathered):
        self._work, self._torch_like, self._out, self._gathered = work, torch_like, out, gathered
        self._result = None

    def wait(self):
        if self._result is None:
            self._result = _results(self._work.wait(), self._torch_like, self._out, self._gathered)
        return self._result

    waited = property(lambda self: self._work.waited, doc="Whether wait() has returned.")

    def communication_done(self):
        """Whether the call's communication has completed (or failed), so that wait() waits for no
        message; True once waited."""
        return self._work.communication_done()


def _call(op, a, b, comm, axis, trans_a, trans_b, schedule, profile, out, gathered, async_op=False):
    args = (op, _to_buffer(a, "a"), _to_buffer(b, "b"), comm, axis, trans_a, trans_b, schedule, profile,
            None if out is None else _to_buffer(out, "out"), _gathered_arg(gathered))
    if async_op:
        return Work(_cofuse.start(*args), _is_tensor(a), out, gathered)
    return _results(_cofuse.call(*args), _is_tensor(a), out, gathered)


def ag_gemm(a, b, comm, *, axis="m", trans_a=False, trans_b=False, schedule="auto", out=None, gathered=None,
            profile=None, async_op=False):
    """C_r = AllGather(op(A)) · op(B_r), fused. Collective over comm.

    a, b: this rank's A_r and B_r (numpy arrays or torch CPU tensors, float32, float64 or
      bfloat16 (numpy: its raw bits as int16/uint16), C-contiguous), shaped as docs/ops.md says: axis "m": op(a) [M/P, K], op(b) [K, N/P];
      axis "k": op(a) [M, K/P], op(b) [K, N/P]. Global M, N, K are inferred from these and
      P = comm.size.
    comm: an mpi4py.MPI.Comm.
    trans_a, trans_b: a (b) is stored transposed; op(x) is then x.T.
    schedule: "auto" (the planner's choice on this machine's calibration, then tuned on the
      first calls: docs/planner.md), a preset ("serial", "hetero-unfused-1d", ...) or a
      schedule string ("overlap=chunk,chunks=4,...").
    out: where C_r [M, N/P] goes (written in place); None = a new array or tensor.
    gathered: None; True = also return the gathered op(A) [M, K] (stored like a); or an array
      to write it into.
    profile: the machine profile "auto" plans on (a shipped name or a file); None = the rule
      ($COFUSE_PROFILE, else a calibration of comm, measured once and cached).
    async_op: True = return a cofuse.Work as soon as the communication needs none of this
      rank's GEMMs left (those wait() runs as their shards arrive), with the communication still
      moving on the op's progress thread, so that the caller can compute meanwhile (a weight
      gradient while the input gradient is reduced); work.wait() returns the result. While it moves, no other cofuse call may run on comm (docs/python.md).
    Returns C_r, or (C_r, gathered) when gathered is True (or a Work that returns them).
    """
    return _call("ag_gemm", a, b, comm, axis, trans_a, trans_b, schedule, profile, out, gathered, async_op)


def gemm_rs(a, b, comm, *, axis="m", trans_a=False, trans_b=False, schedule="auto", out=None, profile=None,
            async_op=False):
    """C_r = block r of Σ_j op(A_j)·op(B_j), fused. Collective over comm.

    a, b: op(a) [M, K/P], op(b) [K/P, N]. axis "m": C_r is rows block r [M/P, N]; axis "n":
    columns block r [M, N/P]. Other arguments as ag_gemm.
    """
    return _call("gemm_rs", a, b, comm, axis, trans_a, trans_b, schedule, profile, out, None, async_op)


def gemm_ar(a, b, comm, *, trans_a=False, trans_b=False, schedule="auto", out=None, profile=None, async_op=False):
    """C = Σ_j op(A_j)·op(B_j) on every rank, fused. Collective over comm.

    a, b: op(a) [M, K/P], op(b) [K/P, N]; C [M, N]. Other arguments as ag_gemm.
    """
    return _call("gemm_ar", a, b, comm, "", trans_a, trans_b, schedule, profile, out, None, async_op)


class Operation:
    """One op bound to a communicator, for calls made again and again: the checks, agreement,
    planning (and with "auto" the tuning) happen once, at construction; each call then costs
    the op itself and one small allreduce (the ranks' verdict on their buffers).

    Operation(op, m, n, k, comm, *, dtype="float32", axis=None, trans_a=False, trans_b=False,
              schedule="auto", profile=None)
      op: "ag_gemm", "gemm_rs" or "gemm_ar". m, n, k: the GLOBAL sizes of C[M,N] = op(A)·op(B).
      comm: an mpi4py.MPI.Comm (its size is P). dtype: "float32"/"float64"/"bfloat16", or a
      numpy or torch dtype. axis: the sharded axis (None = "m"; gemm_ar has none).
      schedule: as ag_gemm. profile: the profile "auto" plans on, or a fixed schedule is
      predicted on (None: auto uses the rule; a fixed schedule gets no prediction).
    Collective, like every method that runs the op. Use it in a `with` block, or close() it,
    to free its plan and progress thread at once.

    op(a, b, out=None, gathered=None) runs it (shapes: .local_shapes) and returns out.
    op.bind(a, b, out=None, gathered=None) agrees on a buffer set once; op() then runs on it with
    no agreement at all, the op's own communication the only message (a decode loop whose
    buffers stay put: over TCP each agreement is a round trip as long as a token's all-reduce).
    .schedule, .schedule_name: what the next call runs. .decided_by: "given", or auto's
    "tuning" (still measuring), "database", "model" or "measurement". .predicted_ms: the
    model's prediction (None without one). .explain(): where the profile came from, the pick
    and how it settled. .last_stats: the last call's times in ms (total, gemm, comm, exposed).
    """

    def __init__(self, op, m, n, k, comm, *, dtype="float32", axis=None, trans_a=False, trans_b=False,
                 schedule="auto", profile=None):
        self._op = _cofuse.Operation(op, m, n, k, comm, _dtype_name(dtype), axis or "", trans_a, trans_b, schedule,
                                     profile)
        self._bound = None  # bind()'s operands and results, kept alive while bound

    def __call__(self, a=None, b=None, out=None, gathered=None):
        """op(a, b, out=None, gathered=None): one call on these operands, returns out (and the
        gathered operand with gathered=True). op(): one call on the bound ones (bind), returns
        what bind returned, now rewritten. Collective."""
        if a is None and b is None and out is None and gathered is None:
            if self._bound is None:
                raise Error("cofuse.Operation(): a call without operands needs bind(a, b, ...) first")
            self._op.run_bound()
            return self._bound[-1]
        result = self._op(_to_buffer(a, "a"), _to_buffer(b, "b"), None if out is None else _to_buffer(out, "out"),
                          _gathered_arg(gathered))
        return _results(result, _is_tensor(a), out, gathered)

    def bind(self, a, b, out=None, gathered=None):
        """Collective: checks this rank's a, b, out and gathered as a call does and agrees once,
        with every rank, that all are usable (every rank raises alike when one is not, and then
        nothing is bound); op() then runs on them with no agreement. Returns out (allocated when
        None), or (out, gathered) with gathered=True: what every op() rewrites. Write new inputs
        into a and b in place between calls; the Operation keeps them (and out) alive, and their
        memory must stay where it is (a torch tensor's resize_() or a numpy array replaced by a
        new one is not seen: bind again). A later bind replaces the set."""
        self._bound = None
        a_buf, b_buf = _to_buffer(a, "a"), _to_buffer(b, "b")
        out_buf = None if out is None else _to_buffer(out, "out")
        gathered_buf = _gathered_arg(gathered)
        result = _results(self._op.bind(a_buf, b_buf, out_buf, gathered_buf), _is_tensor(a), out, gathered)
        self._bound = (a, b, a_buf, b_buf, out, out_buf, gathered, gathered_buf, result)
        return result

    schedule = property(lambda self: self._op.schedule, doc="The schedule the next call runs (string form).")
    schedule_name = property(lambda self: self._op.schedule_name, doc="Its preset name, or the string form.")
    decided_by = property(lambda self: self._op.decided_by, doc="How the schedule was decided.")
    predicted_ms = property(lambda self: self._op.predicted_ms, doc="The model's prediction in ms, or None.")
    last_stats = property(lambda self: self._op.last_stats, doc="The last call's times, ms.")
    local_shapes = property(lambda self: self._op.local_shapes, doc="This rank's shapes of a, b, out (, gathered).")
    description = property(lambda self: self._op.description, doc="The op, global sizes, dtype, layout, ranks.")
    closed = property(lambda self: self._op.closed, doc="Whether close() (or the communicator's end) released it.")

    def explain(self):
        """One paragraph: the profile, the model's pick, how the schedule settled."""
        return self._op.explain()

    def close(self):
        """Frees the op's plan and progress thread now (not collective); later calls raise."""
        self._op.close()
        self._bound = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        state = "closed" if self.closed else f"schedule {self.schedule_name}"
        return f"<cofuse.Operation {self.description}, {state}>"


def operations(comm):
    """What the functional ops (and so the layers of cofuse.torch) built on comm so far, one per
    distinct call (op, shapes, layout, schedule, profile): a list
    of dicts with "description" (op, global sizes, dtype, layout, ranks), "schedule" and
    "schedule_name" (what the next call runs), "decided_by" ("given", or auto's "tuning",
    "database", "model", "measurement") and "explain". Not collective."""
    return _cofuse.cached_operations(comm)


def deadline(comm, seconds, what="python code"):
    """A deadline over a whole block, for `with cofuse.deadline(comm, 60, "training step"):`.

    Everything this rank does inside the block (cofuse calls on comm, and the caller's own MPI
    calls between them: mpi4py collectives, torch.distributed on another transport does not
    count) must end within `seconds`, else the rank prints what it waits for and the job is
    aborted (exit 124). Without it, a peer that stalls OUTSIDE a cofuse call hangs the others'
    next collective forever; each cofuse call alone is bounded by $COFUSE_DEADLINE_S.
    seconds: > 0; 0 = none; < 0 = $COFUSE_DEADLINE_S, else 600. what: names the block in the
    report. Guards do not nest; the first on a communicator is collective.
    """
    return _cofuse.Deadline(comm, float(seconds), what)


def plan(op, m, n, k, ranks, *, dtype="float32", axis=None, trans_a=False, trans_b=False, profile=None,
         schedule="auto", top=10, rank=0):
    """What the planner makes of an op, without MPI (any rank count, any machine's profile).

    schedule "auto": the dict `cofuse plan --schedule auto --json` prints: the choice, why, the
    predictions of the `top` best candidates (the unfused baselines and the choice always among them).
    A given schedule: {"op", "schedule", "schedule_name", "plan"}, "plan" being rank `rank`'s
    task plan as text.
    """
    result = _cofuse.plan(op, m, n, k, ranks, _dtype_name(dtype), axis or "", trans_a, trans_b, profile, schedule, top,
                          rank)
    if isinstance(result, str):
        return _json.loads(result)
    desc, schedule_text, name, tasks = result
    return {"op": desc, "schedule": schedule_text, "schedule_name": name, "plan": tasks}


def simulate(op, m, n, k, ranks, *, dtype="float32", axis=None, trans_a=False, trans_b=False, schedule="serial",
             profile=None):
    """The simulator's prediction of one schedule, without MPI: the dict `cofuse sim --json`
    prints (makespan_ms, speedup_vs_serial, overlap_efficiency, losses_ms, ...)."""
    return _json.loads(_cofuse.simulate(op, m, n, k, ranks, _dtype_name(dtype), axis or "", trans_a, trans_b, profile,
                                        schedule))

"""PyTorch tensor-parallel layers on cofuse's fused ops, and drop-in forms of PyTorch's
async-TP ops (docs/python.md).

Megatron-LM's conventions: a linear layer computes y = x·Wᵀ + b with W [out, in]; T tokens;
P = comm.size; rank r. SP = sequence parallelism: the layer's replicated side is split along
tokens instead. Which fused op serves which GEMM is docs/training.md's table:

  ColumnParallelLinear  weight [out/P, in] (rows block r), bias [out/P]
    forward   no SP: local GEMM        SP: ag_gemm (gather x along tokens, keep it for wgrad)
    dgrad     no SP: gemm_ar           SP: gemm_rs (dx = token block r)
    wgrad     local GEMM on the (gathered) input
  RowParallelLinear     weight [out, in/P] (columns block r), bias [out] (whole)
    forward   no SP: gemm_ar           SP: gemm_rs (y = token block r)
    dgrad     no SP: local GEMM        SP: ag_gemm (gather dy along tokens, keep it for wgrad)
    wgrad     local GEMM on the (gathered) dy

Every forward and backward is COLLECTIVE over the layer's communicator: every rank runs the
same model on the same number of tokens. CPU tensors, float32, float64 or bfloat16.
"""
import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

import cofuse as _cofuse


def _matmul(a, b):
    """a @ b for the layers' local GEMMs, through the BLAS cofuse's ops use (numpy's, OpenBLAS
    on Debian) on the tensors' memory: Debian's torch multiplies float32 matrices 20-30% slower
    here (76 against 98 GFLOP/s for a weight gradient, 2048 tokens, bench/torch_mlp.py's
    shapes), and a layer whose fused GEMMs are fast should not lose it on the local ones.
    Transposed views stay views (BLAS reads them transposed)."""
    if a.dtype != b.dtype:  # torch.matmul refuses these too (numpy would promote silently)
        raise TypeError(f"expected both operands of one dtype, got {a.dtype} and {b.dtype}")
    if a.dtype is torch.bfloat16:  # numpy has no bfloat16; torch's CPU bf16 matmul is oneDNN's too
        try:
            return torch.matmul(a.detach(), b.detach())
        except RuntimeError:
            # Where torch's oneDNN has no bf16 matmul for this CPU (AVX2 only, or
            # ONEDNN_MAX_CPU_ISA=AVX2): cofuse's widened path's contract, bf16 values
            # multiplied in float32 and rounded once.
            return torch.from_numpy(np.matmul(a.detach().float().numpy(), b.detach().float().numpy())).to(torch.bfloat16)
    return torch.from_numpy(np.matmul(a.detach().numpy(), b.detach().numpy()))


def _linear(x, weight):
    """F.linear (with autograd) for a model's own GEMMs beside the fused ones (a replicated head,
    say), with _matmul's contract where torch's oneDNN has no bf16 matmul for this CPU (AVX2
    only, or ONEDNN_MAX_CPU_ISA=AVX2): bf16 values multiplied in float32 and rounded once."""
    if x.dtype is not torch.bfloat16:
        return F.linear(x, weight)
    try:
        return F.linear(x, weight)
    except RuntimeError:
        return F.linear(x.float(), weight.float()).to(torch.bfloat16)


def _contiguous(t):
    return t if t.is_contiguous() else t.contiguous()


def _finish_forward(ctx, y, bias, layer, sp, x_kept, weight):
    """Both layers' forward ends alike: the bias, and what backward needs kept."""
    if bias is not None:
        y += bias
    ctx.layer = layer
    ctx.sp = sp
    ctx.has_bias = bias is not None
    ctx.save_for_backward(x_kept, weight)
    return y


class _ColumnParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, layer, sp):
        if sp:  # y = AllGather(x) · Wᵀ, the gathered x kept for wgrad
            y, x_full = _cofuse.ag_gemm(_contiguous(x), weight, layer.comm, trans_b=True, gathered=True,
                                        schedule=layer.schedule, profile=layer.profile)
        else:
            x_full = x
            y = _matmul(x, weight.t())
        return _finish_forward(ctx, y, bias, layer, sp, x_full, weight)

    @staticmethod
    def backward(ctx, dy):
        layer = ctx.layer
        x_full, weight = ctx.saved_tensors
        dy = _contiguous(dy)
        # dx = Σ_r dy_r·W_r: all-reduced (no SP), or scattered along tokens (SP). Started, not
        # called: its communication moves while this rank computes the weight gradient, which
        # does not need it (Megatron's overlap of the input gradient's reduction with wgrad).
        op = _cofuse.gemm_rs if ctx.sp else _cofuse.gemm_ar
        work = op(dy, weight, layer.comm, schedule=layer.schedule, profile=layer.profile, async_op=True)
        dw = _matmul(dy.t(), x_full)
        db = dy.sum(0) if ctx.has_bias else None
        return work.wait(), dw, db, None, None


class _RowParallel(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, layer, sp):
        x = _contiguous(x)
        # y = Σ_r x_r·W_rᵀ: all-reduced (no SP), or scattered along tokens (SP)
        op = _cofuse.gemm_rs if sp else _cofuse.gemm_ar
        y = op(x, weight, layer.comm, trans_b=True, schedule=layer.schedule, profile=layer.profile)
        return _finish_forward(ctx, y, bias, layer, sp, x, weight)

    @staticmethod
    def backward(ctx, dy):
        layer = ctx.layer
        x, weight = ctx.saved_tensors
        dy = _contiguous(dy)
        if ctx.sp:  # dx = AllGather(dy) · W_r, the gathered dy kept for wgrad
            dx, dy_full = _cofuse.ag_gemm(dy, weight, layer.comm, gathered=True, schedule=layer.schedule,
                                          profile=layer.profile)
        else:
            dy_full = dy
            dx = _matmul(dy, weight)
        dw = _matmul(dy_full.t(), x)
        db = dy_full.sum(0) if ctx.has_bias else None  # the whole bias's gradient, alike on every rank
        return dx, dw, db, None, None


class _ParallelLinear(nn.Module):
    def __init__(self, in_features, out_features, comm, *, bias, sequence_parallel, dtype, schedule, profile, seed,
                 split):
        super().__init__()
        self.comm = comm
        self.world = comm.Get_size()
        self.rank = comm.Get_rank()
        self.in_features = in_features
        self.out_features = out_features
        self.sequence_parallel = sequence_parallel
        self.schedule = schedule
        self.profile = profile
        self._split = split  # "rows" (column-parallel) or "columns" (row-parallel)
        self._bound = {}  # bound_forward's Operations, by x's (shape, dtype)
        split_size = out_features if split == "rows" else in_features
        if split_size % self.world:
            raise _cofuse.Error(f"{type(self).__name__}: {'out' if split == 'rows' else 'in'}_features={split_size} "
                                f"is not divisible by the communicator's {self.world} ranks")
        shape = [out_features // self.world, in_features] if split == "rows" else [out_features, in_features // self.world]
        self.weight = nn.Parameter(torch.empty(shape, dtype=dtype))
        bias_size = out_features // self.world if split == "rows" else out_features
        self.bias = nn.Parameter(torch.empty(bias_size, dtype=dtype)) if bias else None
        self.reset_parameters(seed)

    def reset_parameters(self, seed=0):
        """nn.Linear's initialisation (uniform in ±1/sqrt(in_features)) of the WHOLE weight and
        bias from `seed`, the same on every rank, then this rank's shard: any P gives one model."""
        g = torch.Generator().manual_seed(seed)
        bound = 1.0 / math.sqrt(self.in_features)
        weight = (torch.rand(self.out_features, self.in_features, generator=g, dtype=torch.float64) * 2 - 1) * bound
        bias = (torch.rand(self.out_features, generator=g, dtype=torch.float64) * 2 - 1) * bound
        self.load_whole(weight, bias)

    def load_whole(self, weight, bias=None):
        """Sets this rank's shard from the WHOLE weight [out, in] (and bias [out])."""
        with torch.no_grad():
            self.weight.copy_(self.shard_weight(weight))
            if self.bias is not None and bias is not None:
                self.bias.copy_(self.shard_bias(bias))

    def shard_weight(self, whole):
        """This rank's block of a whole [out, in] tensor (a weight or its gradient)."""
        if self._split == "rows":
            return whole.chunk(self.world, 0)[self.rank]
        return whole.chunk(self.world, 1)[self.rank]

    def shard_bias(self, whole):
        """This rank's part of a whole [out] bias: its block (column-parallel) or all of it (row)."""
        return whole.chunk(self.world, 0)[self.rank] if self._split == "rows" else whole

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, ranks={self.world}, "
                f"bias={self.bias is not None}, sequence_parallel={self.sequence_parallel}, schedule={self.schedule!r}")


class Binding:
    """How long a RowParallelLinear's bound all-reduce stays bound (bound_forward): the layer
    binds once per Binding and reuses that while the same Binding comes back. A token of identity
    and nothing else; every rank must pass its own the same calls alike (TensorParallelGPT's
    KVCache has one)."""


class ColumnParallelLinear(_ParallelLinear):
    """y = x·Wᵀ + b with W's rows split over the ranks.

    weight: [out/P, in] (rows block r of W); bias: [out/P]. forward(x): x is [T, in]
    (replicated) or, with sequence_parallel, [T/P, in] (token block r); returns [T, out/P].
    schedule: of every fused GEMM ("auto": planned on this machine and tuned on the first
    calls); profile: the profile auto plans on (None = the rule: a calibration of comm).
    seed: the whole weight's initialisation (reset_parameters).
    """

    def __init__(self, in_features, out_features, comm, *, bias=True, sequence_parallel=False, dtype=torch.float32,
                 schedule="auto", profile=None, seed=0):
        super().__init__(in_features, out_features, comm, bias=bias, sequence_parallel=sequence_parallel, dtype=dtype,
                         schedule=schedule, profile=profile, seed=seed, split="rows")

    def forward(self, x, sequence_parallel=None):
        """sequence_parallel: None = the layer's own setting; True or False = this call's (a model
        trained with SP decodes without it, one token per sequence)."""
        sp = self.sequence_parallel if sequence_parallel is None else sequence_parallel
        return _ColumnParallel.apply(x, self.weight, self.bias, self, sp)


class RowParallelLinear(_ParallelLinear):
    """y = x·Wᵀ + b with W's columns split over the ranks.

    weight: [out, in/P] (columns block r of W); bias: [out] (whole, added once after the
    reduction). forward(x): x is [T, in/P]; returns [T, out] (all-reduced) or, with
    sequence_parallel, [T/P, out] (token block r). Other arguments as ColumnParallelLinear.
    """

    def __init__(self, in_features, out_features, comm, *, bias=True, sequence_parallel=False, dtype=torch.float32,
                 schedule="auto", profile=None, seed=0):
        super().__init__(in_features, out_features, comm, bias=bias, sequence_parallel=sequence_parallel, dtype=dtype,
                         schedule=schedule, profile=profile, seed=seed, split="columns")

    def forward(self, x, sequence_parallel=None, binding=None):
        """sequence_parallel: as ColumnParallelLinear.forward's. binding: None, or a Binding
        that this call, when it runs without sequence parallelism and without autograd (an
        inference step), may bind its all-reduce to (bound_forward)."""
        sp = self.sequence_parallel if sequence_parallel is None else sequence_parallel
        if binding is not None and not sp and not torch.is_grad_enabled():
            return self.bound_forward(x, binding)
        return _RowParallel.apply(x, self.weight, self.bias, self, sp)

    @torch.no_grad()
    def bound_forward(self, x, binding):
        """forward(x) without sequence parallelism and without autograd, for a decode loop: the
        all-reduce runs on an Operation of this layer's bound to a buffer of x's shape and to the
        weight (cofuse.Operation.bind), so that each call sends the all-reduce's own messages and
        nothing else, where a functional call agrees twice (docs/python.md "Bound calls"). x is
        copied into the bound buffer; the result is a new tensor.

        binding: a Binding, how long a binding lasts (a KV cache's life: TensorParallelGPT
        makes one per cache). The first call of each binding, and of each new shape or dtype of
        x, binds (collective, as every call is); later calls of the same binding reuse it.
        Between them the weight must stay where it is (an optimizer's in-place step does;
        replacing the parameter's storage does not: use a new Binding), else this raises. The
        check is this rank's own: a weight moved on some ranks only raises there, and the
        others' all-reduce then ends at the call deadline. A layer keeps its Operations for up
        to 4 shapes of x; a fifth closes them all and starts again."""
        x = _contiguous(x)
        key = (tuple(x.shape), x.dtype)
        entry = self._bound.get(key)
        if entry is None:
            if len(self._bound) >= 4:  # shapes come and go (batch sizes): keep a few, not every one
                for old in self._bound.values():
                    old["op"].close()
                self._bound.clear()
            m, k_local = x.shape
            op = _cofuse.Operation("gemm_ar", m, self.out_features, k_local * self.world, self.comm, dtype=x.dtype,
                                   trans_b=True, schedule=self.schedule, profile=self.profile)
            with torch.inference_mode(False):  # a normal tensor, usable in and out of inference mode
                a = torch.empty(x.shape, dtype=x.dtype)
            entry = self._bound[key] = {"op": op, "a": a, "binding": None}
        if entry["binding"] is not binding:
            entry["out"] = entry["op"].bind(entry["a"], self.weight.detach())
            entry["binding"], entry["weight"] = binding, self.weight.data_ptr()
        elif entry["weight"] != self.weight.data_ptr():
            raise _cofuse.Error(f"{type(self).__name__}.bound_forward: the weight's storage moved since it was "
                                f"bound; bind again with a new cofuse.torch.Binding")
        entry["a"].copy_(x)
        entry["op"]()
        out = entry["out"]
        return out + self.bias if self.bias is not None else out.clone()


class TensorParallelMLP(nn.Module):
    """The transformer MLP: ColumnParallelLinear(hidden -> ffn), GeLU (tanh form),
    RowParallelLinear(ffn -> hidden), both with bias. forward(x): x [T, hidden], or [T/P,
    hidden] with sequence_parallel; returns the same shape. seed: the whole weights' start
    (the column layer takes seed, the row layer seed + 1), so any P gives one model."""

    def __init__(self, hidden, ffn, comm, *, sequence_parallel=False, dtype=torch.float32, schedule="auto",
                 profile=None, seed=0):
        super().__init__()
        common = dict(sequence_parallel=sequence_parallel, dtype=dtype, schedule=schedule, profile=profile)
        self.fc1 = ColumnParallelLinear(hidden, ffn, comm, seed=seed, **common)
        self.fc2 = RowParallelLinear(ffn, hidden, comm, seed=seed + 1, **common)

    def forward(self, x, sequence_parallel=None, binding=None):
        """sequence_parallel: as ColumnParallelLinear.forward's; binding: as
        RowParallelLinear.forward's (fc2's)."""
        return self.fc2(F.gelu(self.fc1(x, sequence_parallel), approximate="tanh"), sequence_parallel, binding)


# ---- drop-in forms of torch.ops.symm_mem's async-TP ops, with an mpi4py communicator ----

def _as_rows(t, dim):
    """t with `dim` moved first and every dimension but the last folded into it: [rows, last]."""
    moved = t.movedim(dim, 0)
    return _contiguous(moved).reshape(-1, t.shape[-1]), moved.shape


def fused_all_gather_matmul(a_shard, bs, gather_dim, comm, *, return_a=True, return_A=None, schedule="auto"):
    """all_gather(a_shard, gather_dim) @ B for every B in bs, the gather overlapped with the
    first GEMM (cofuse.ag_gemm; the others multiply the gathered A). As
    torch.ops.symm_mem.fused_all_gather_matmul, with comm where it takes a group name.

    a_shard: [..., K], gathered along gather_dim (not the last dimension); bs: [K, N_i]
    matrices, the same on every rank. Returns (A or None, [A @ B_i]), A being the gathered
    a_shard. return_A is accepted as a synonym of return_a (PyTorch's spelling).
    """
    if return_A is not None:
        return_a = return_A
    dim = gather_dim % a_shard.dim()
    if dim == a_shard.dim() - 1:
        a_rows = "a_shard: gathering along its last dimension (K) is not supported: gather_dim must be another"
        moved_shape = None
    else:
        a_rows, moved_shape = _as_rows(a_shard, dim)
    world = comm.Get_size()
    outputs = []
    first, gathered = _cofuse.ag_gemm(a_rows, _contiguous(bs[0]), comm, gathered=True, schedule=schedule)
    for i, b in enumerate(bs):
        rows = first if i == 0 else _matmul(gathered, b)
        shape = (moved_shape[0] * world, *moved_shape[1:-1], rows.shape[-1])
        outputs.append(rows.reshape(shape).movedim(0, dim))
    a = gathered.reshape(moved_shape[0] * world, *moved_shape[1:]).movedim(0, dim) if return_a else None
    return a, outputs


def fused_matmul_reduce_scatter(a, b, reduce_op, scatter_dim, comm, *, schedule="auto"):
    """reduce_scatter(a @ b, reduce_op, scatter_dim), the scatter overlapped with the GEMM
    (cofuse.gemm_rs). As torch.ops.symm_mem.fused_matmul_reduce_scatter, with comm where it
    takes a group name.

    a: [..., K_local] (this rank's partial), b: [K_local, N]; reduce_op "sum" or "avg";
    scatter_dim: any dimension of the result [..., N]. Returns this rank's block of the result.
    """
    world = comm.Get_size()
    out_dims = a.dim()
    dim = scatter_dim % out_dims
    b = _contiguous(b)
    if reduce_op not in ("sum", "avg"):
        a_rows, moved_shape, axis = f"reduce_op {reduce_op!r} is not supported: 'sum' or 'avg'", None, "m"
    elif dim != out_dims - 1 and a.shape[dim] % world:
        a_rows, moved_shape, axis = (f"scatter_dim {scatter_dim}: the result's size {a.shape[dim]} there is not divisible "
                                     f"by the communicator's {world} ranks"), None, "m"
    elif dim == out_dims - 1:  # the columns: gemm_rs along n
        a_rows, moved_shape, axis = _contiguous(a).reshape(-1, a.shape[-1]), None, "n"
    else:
        (a_rows, moved_shape), axis = _as_rows(a, dim), "m"
    c = _cofuse.gemm_rs(a_rows, b, comm, axis=axis, schedule=schedule)
    if reduce_op == "avg":
        c /= world
    if axis == "n":
        return c.reshape(*a.shape[:-1], c.shape[-1])
    return c.reshape(moved_shape[0] // world, *moved_shape[1:-1], c.shape[-1]).movedim(0, dim)

"""The PyTorch layers and the MLP, forward and backward, against plain PyTorch autograd on the
whole tensors in one process, in float64 (every rank computes that reference itself): outputs, input
gradients, weight and bias gradients, SP on and off, bias on and off, float32 and float64.
And the drop-in forms of PyTorch's async-TP ops against what they stand for."""
import itertools

import numpy as np
import pytest
import torch
from torch.nn import functional as F

import cofuse
import cofuse.torch as ct
from conftest import P, RANK, SEED, assert_close, tolerance


def whole(rng, shape, dtype):
    return torch.from_numpy(rng.random(shape) * 2 - 1).to(dtype)


def tokens_block(t):
    return t.chunk(P, 0)[RANK]


def exact(t):
    """A float64 leaf copy of t, for the reference that cofuse's results are checked against."""
    return t.detach().to(torch.float64, copy=True).requires_grad_()


def check(got, want, k, dtype):
    assert_close(got.detach().numpy(), want.detach().numpy(), k, np.float32 if dtype == torch.float32 else np.float64)


def whole_layer(rng, layer, T, bias, dtype):
    """Random whole weights loaded into `layer`, a whole input x and output gradient dy, and the
    reference: the whole layer in one process, in float64, run forward and backward. Returns
    x, dy, (x, w, b, y) of the reference, whose .grad hold the whole gradients."""
    fout, fin = layer.out_features, layer.in_features
    w, b = whole(rng, (fout, fin), dtype), whole(rng, (fout,), dtype)
    layer.load_whole(w, b)
    x, dy = whole(rng, (T, fin), dtype), whole(rng, (T, fout), dtype)
    xr, wr, br = exact(x), exact(w), exact(b)
    yr = F.linear(xr, wr, br if bias else None)
    yr.backward(dy.to(torch.float64))
    return x, dy, (xr, wr, br, yr)


CASES = list(itertools.product([False, True], [False, True], [torch.float32, torch.float64]))


@pytest.mark.parametrize("sp,bias,dtype", CASES)
def test_column_parallel_linear(comm, rng, sp, bias, dtype):
    T, fin, fout = 6 * P, 10, 4 * P
    layer = ct.ColumnParallelLinear(fin, fout, comm, bias=bias, sequence_parallel=sp, dtype=dtype, seed=SEED % 1000)
    x, dy, (xr, wr, br, yr) = whole_layer(rng, layer, T, bias, dtype)
    # this rank's part
    xl = (tokens_block(x) if sp else x).clone().requires_grad_()
    y = layer(xl)
    y.backward(layer.shard_weight(dy.t()).t().contiguous())  # dY_r: columns block r
    check(y, layer.shard_weight(yr.t()).t(), fin, dtype)
    check(xl.grad, tokens_block(xr.grad) if sp else xr.grad, fout, dtype)
    check(layer.weight.grad, layer.shard_weight(wr.grad), T, dtype)
    if bias:
        check(layer.bias.grad, layer.shard_bias(br.grad), T, dtype)
    else:
        assert layer.bias is None


@pytest.mark.parametrize("sp,bias,dtype", CASES)
def test_row_parallel_linear(comm, rng, sp, bias, dtype):
    T, fin, fout = 6 * P, 4 * P, 10
    layer = ct.RowParallelLinear(fin, fout, comm, bias=bias, sequence_parallel=sp, dtype=dtype)
    x, dy, (xr, wr, br, yr) = whole_layer(rng, layer, T, bias, dtype)
    xl = layer.shard_weight(x).contiguous().requires_grad_()  # X_r: columns block r, like W_r
    y = layer(xl)
    y.backward(tokens_block(dy) if sp else dy)
    check(y, tokens_block(yr) if sp else yr, fin, dtype)
    check(xl.grad, layer.shard_weight(xr.grad), fout, dtype)
    check(layer.weight.grad, layer.shard_weight(wr.grad), T, dtype)
    if bias:
        check(layer.bias.grad, br.grad, T, dtype)


def close(got, want, k, dtype):
    """check(), with bfloat16's tolerance (8 of its epsilons, 2^-8, times sqrt(k) + 4) too."""
    if dtype != torch.bfloat16:
        return check(got, want, k, dtype)
    got, want = got.detach().to(torch.float64), want.detach().to(torch.float64)
    assert (torch.linalg.norm(got - want) / torch.linalg.norm(want)).item() <= 8 * 2.0**-8 * (k**0.5 + 4)


@pytest.mark.parametrize("bias,dtype", [(True, torch.float32), (False, torch.float64), (True, torch.bfloat16)])
def test_row_parallel_bound_forward(comm, rng, bias, dtype):
    """An inference loop through bound_forward: each step's new x (copied into the bound buffer)
    gives the reference's output, a new tensor each step; an in-place weight update (what an
    optimizer does) is seen without binding again; a new Binding binds again after the weight
    moved to new storage, which the old one refuses on every rank alike; with autograd on, the
    binding is not used."""
    fin, fout = 4 * P, 7
    layer = ct.RowParallelLinear(fin, fout, comm, bias=bias, dtype=dtype)
    binding = ct.Binding()
    outputs = []
    for step in range(4):
        x = whole(rng, (3, fin), dtype)
        if step != 1:  # step 1 keeps step 0's weight
            w = whole(rng, (fout, fin), dtype)
            with torch.no_grad():
                layer.weight.copy_(layer.shard_weight(w))
        with torch.no_grad():
            y = layer(layer.shard_weight(x).contiguous(), binding=binding)
        close(y, F.linear(exact(x), exact(w), exact(layer.bias) if bias else None), fin, dtype)
        outputs.append(y)
    assert len({o.data_ptr() for o in outputs}) == len(outputs)  # each the caller's to keep
    assert len(layer._bound) == 1
    with torch.no_grad():
        layer.weight.data = layer.weight.detach().clone()
    x = layer.shard_weight(whole(rng, (3, fin), dtype)).contiguous()
    with torch.no_grad(), pytest.raises(cofuse.Error, match="storage moved"):
        layer(x, binding=binding)
    with torch.no_grad():
        close(layer(x, binding=ct.Binding()), layer(x), fin, dtype)
    xg = x.clone().requires_grad_()
    layer(xg, binding=binding).sum().backward()
    assert xg.grad is not None and layer.weight.grad is not None


def relative_error(got, want):
    got, want = got.detach().to(torch.float64), want.detach().to(torch.float64)
    return (torch.linalg.norm(got - want) / max(torch.linalg.norm(want), 1e-300)).item()


def mlp(hidden, ffn, dtype):
    return torch.nn.Sequential(torch.nn.Linear(hidden, ffn, dtype=dtype), torch.nn.GELU(approximate="tanh"),
                               torch.nn.Linear(ffn, hidden, dtype=dtype))


@pytest.mark.parametrize("sp,dtype", [(False, torch.float32), (True, torch.float32), (True, torch.float64)])
def test_mlp_and_optimizer(comm, rng, sp, dtype):
    T, hidden, ffn = 4 * P, 8, 6 * P
    ours = ct.TensorParallelMLP(hidden, ffn, comm, sequence_parallel=sp, dtype=dtype, seed=3)
    # Three copies of one model, trained alike: cofuse's, the exact answer (float64), and plain
    # PyTorch in cofuse's dtype. Each result of ours must be within one chained computation's
    # tolerance of the exact one. The loss is the mean square (the sum over every rank's tokens
    # divided by the whole count), so the three SGD steps stay small: with the plain sum, lr 0.1
    # diverged (loss 379, then 2.1e4, then 1.2e7 at 4 ranks, seed 767816724) and each step
    # multiplied everyone's rounding by ~10, PyTorch's own included, until the check measured
    # the divergence rather than cofuse. PyTorch's own error is printed beside a failure.
    exact, plain = mlp(hidden, ffn, torch.float64), mlp(hidden, ffn, dtype)
    for i, layer in [(0, ours.fc1), (2, ours.fc2)]:
        w, b = whole(rng, tuple(exact[i].weight.shape), dtype), whole(rng, tuple(exact[i].bias.shape), dtype)
        for model in (exact, plain):
            model[i].weight.data.copy_(w), model[i].bias.data.copy_(b)
        layer.load_whole(w, b)
    # The chain's own bound: one dot product's tolerance as long as the whole chain, 8 times
    # over (three steps of two forward and four backward GEMMs; 4.9e-14 against 2.1e-14 for
    # float64 at 4 ranks, where PyTorch in float64 is the exact answer and cannot say more).
    k = hidden + ffn + 2 * T
    limit = 8 * tolerance(np.float32 if dtype == torch.float32 else np.float64, k)

    def check_trained(got, shard, part):
        """got: this rank's value; shard(whole) its block; part(model): that value in a model."""
        ours_error = relative_error(got, shard(part(exact)))
        plain_error = relative_error(shard(part(plain)), shard(part(exact)))
        assert ours_error <= limit, (
            f"relative error {ours_error:.3g}; PyTorch's own {plain_error:.3g}; limit {limit:.3g} (seed {SEED})")

    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (ours, exact, plain)]
    for _ in range(3):
        x = whole(rng, (T, hidden), dtype)
        y, y_exact, y_plain = ours(tokens_block(x) if sp else x), exact(x.to(torch.float64)), plain(x)
        rows = tokens_block if sp else (lambda t: t)
        check_trained(y, rows, lambda m: y_exact if m is exact else y_plain)
        # Under SP each rank's loss covers its own tokens, and their sum is the whole model's
        # loss: the gathers in backward give each rank the whole gradient of its shards.
        losses = [(t ** 2).sum() / (T * hidden) for t in (y, y_exact, y_plain)]
        total = comm.allreduce(losses[0].item()) if sp else losses[0].item()
        assert np.isclose(total, losses[1].item(), rtol=1e-4 if dtype == torch.float32 else 1e-10)
        for o, loss in zip(optimizers, losses):
            o.zero_grad()
            loss.backward()
        check_trained(ours.fc1.weight.grad, ours.fc1.shard_weight, lambda m: m[0].weight.grad)
        check_trained(ours.fc1.bias.grad, ours.fc1.shard_bias, lambda m: m[0].bias.grad)
        check_trained(ours.fc2.weight.grad, ours.fc2.shard_weight, lambda m: m[2].weight.grad)
        check_trained(ours.fc2.bias.grad, lambda t: t, lambda m: m[2].bias.grad)
        for o in optimizers:
            o.step()
    check_trained(ours.fc1.weight, ours.fc1.shard_weight, lambda m: m[0].weight)


def test_bfloat16_training_follows_float32(comm):
    """The MLP trained in bfloat16 (oneDNN GEMMs, partial sums in bf16 added in float32) and in
    float32 from the same weights and data: 20 SGD steps on a regression whose loss falls, the
    two loss curves apart by under 2% (5 bf16 unit roundoffs, 2^-8 each; measured 0.6% at 2 ranks)."""
    T, hidden, ffn = 32 * P, 32, 64 * P
    g = torch.Generator().manual_seed(5)
    x = torch.rand(T, hidden, generator=g, dtype=torch.float64) * 2 - 1
    target = torch.sin(3 * x)
    curves = []
    for dtype in (torch.float32, torch.bfloat16):
        model = ct.TensorParallelMLP(hidden, ffn, comm, dtype=dtype, seed=3, schedule="hetero-unfused-1d")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        losses = []
        for _ in range(20):
            loss = ((model(x.to(dtype)) - target.to(dtype)).float() ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        assert model.fc1.weight.dtype is dtype
        curves.append(np.array(losses))
    f32, bf16 = curves
    assert f32[-1] < 0.97 * f32[0], f"the float32 loss did not fall: {f32}"
    apart = np.max(np.abs(bf16 - f32) / f32)
    assert apart < 0.02, f"bf16 loss {bf16} against float32 {f32}: {apart:.3g} apart (seed {SEED})"


def test_async_tp_drop_ins(comm, rng):
    dtype = torch.float64
    for gather_dim in [0, 1]:
        a = whole(rng, (2 * P, 3 * P, 5), dtype)  # the whole A; each rank holds a block along gather_dim
        bs = [whole(rng, (5, 4), dtype), whole(rng, (5, 7), dtype)]
        shard = a.chunk(P, gather_dim)[RANK].contiguous()
        got_a, outputs = ct.fused_all_gather_matmul(shard, bs, gather_dim, comm)
        assert torch.equal(got_a, a)
        for out, b in zip(outputs, bs):
            check(out, a @ b, 5, dtype)
        assert ct.fused_all_gather_matmul(shard, bs, gather_dim, comm, return_A=False)[0] is None
    for scatter_dim, reduce_op in [(0, "sum"), (1, "avg"), (-1, "sum")]:
        parts = [whole(rng, (2 * P, 3 * P, 4), dtype) for _ in range(P)]  # each rank's partial A
        b_parts = [whole(rng, (4, 2 * P), dtype) for _ in range(P)]
        total = sum(p @ q for p, q in zip(parts, b_parts)) / (P if reduce_op == "avg" else 1)
        got = ct.fused_matmul_reduce_scatter(parts[RANK], b_parts[RANK], reduce_op, scatter_dim, comm)
        check(got, total.chunk(P, scatter_dim)[RANK], 4 * P, dtype)

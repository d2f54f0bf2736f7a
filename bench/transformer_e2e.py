#!/usr/bin/python3
"""A whole transformer, end to end: training tokens/s, prefill latency and decode per-token
latency of one GPT-style model (cofuse.plain_gpt's layout) three ways, measured side by side in
one run (one phase at a time: every way's training steps, then its blocks, then its generations,
the ways interleaved within a phase; each phase's median over its repeats, the slowest rank's time):

  cofuse-auto    cofuse.transformer.TensorParallelGPT, schedule "auto" (planned and tuned here)
  cofuse-serial  the same with schedule "serial" (cofuse's unfused baseline)
  torch-tp       the same model with plain torch.distributed tensor parallelism written HERE
                 (gloo all_reduce, Megatron-LM's layout without sequence parallelism: Debian 12's
                 torch 1.13 gloo has no reduce_scatter), sharing no code with cofuse
  torch-tp-async the same, with Megatron-LM's column-parallel backward: the input gradient's
                 all-reduce started (async_op=True, run by gloo's own thread) while the weight
                 gradient is computed, as cofuse.torch's layers do
"x torch" is against the faster torch way in each column (the strongest plain baseline).

Beside the end-to-end numbers, per layer: one transformer block's forward+backward alone, at the
training shape, each way (so a layer's speed-up can be told from the model's). Also the output
error of each against the float64 model in one process, and the peak resident memory.

  mpirun -np P /usr/bin/python3 bench/transformer_e2e.py [--json FILE] [--steps 12] ...
  bench/netlab --rate 2gbit --topology shared -- /usr/bin/python3 bench/transformer_e2e.py ...
  bench/netlab --rate 2gbit -- /usr/bin/python3 bench/transformer_e2e.py ...   (switch: gloo on eth0)
"""
import argparse
import json
import math
import os
import re
import resource
import statistics
import subprocess
import time

import torch
import torch.distributed as dist
from mpi4py import MPI
from torch import nn
from torch.nn import functional as F

import cofuse
from cofuse.plain_gpt import GPTConfig, PlainGPT
from cofuse.transformer import TensorParallelGPT

COMM = MPI.COMM_WORLD
P, RANK = COMM.size, COMM.rank


# ---- plain torch.distributed tensor parallelism, written here (no cofuse) ----

class _AllReduceForward(torch.autograd.Function):  # Megatron's g: all-reduce forward, identity backward
    @staticmethod
    def forward(ctx, x):
        x = x.clone()
        dist.all_reduce(x)
        return x

    @staticmethod
    def backward(ctx, dy):
        return dy


class _AllReduceBackward(torch.autograd.Function):  # Megatron's f: identity forward, all-reduce backward
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, dy):
        dy = dy.clone()
        dist.all_reduce(dy)
        return dy


class _ColumnLinearAsync(torch.autograd.Function):
    """Megatron-LM's column-parallel linear with its async input-gradient all-reduce: forward
    x·Wᵀ + b on the replicated x; backward starts the all-reduce of dx and computes dW meanwhile."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        return F.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, dy):
        x, weight = ctx.saved_tensors
        dx = dy @ weight
        work = dist.all_reduce(dx, async_op=True)
        dy2, x2 = dy.reshape(-1, dy.shape[-1]), x.reshape(-1, x.shape[-1])
        dw, db = dy2.t() @ x2, dy2.sum(0)
        work.wait()
        return dx, dw, db


def _norm(kind, size, eps):
    if kind == "layer":
        return nn.LayerNorm(size, eps=eps)
    return _TorchRMSNorm(size, eps)


class _TorchRMSNorm(nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class TorchTPBlock(nn.Module):
    def __init__(self, c, async_dgrad=False):
        super().__init__()
        self.c, self.hl, self.async_dgrad = c, c.heads // P, async_dgrad
        self.norm1, self.norm2 = _norm(c.norm, c.hidden, c.eps), _norm(c.norm, c.hidden, c.eps)
        self.qkv = nn.Linear(c.hidden, 3 * c.hidden // P)  # rows block r: whole heads
        self.proj = nn.Linear(c.hidden // P, c.hidden)  # columns block r; its bias added once
        self.fc1 = nn.Linear(c.hidden, c.ffn // P)
        self.fc2 = nn.Linear(c.ffn // P, c.hidden)

    def forward(self, x, cache=None, index=0, first=0):  # x [B, S, hidden], replicated
        b, s, _ = x.shape
        qkv = self.column(self.qkv, self.norm1(x)).view(b, s, self.hl, 3, self.c.head_dim)
        q, k, v = (qkv[:, :, :, i].transpose(1, 2) for i in range(3))
        if cache is not None:
            if cache[index] is not None:
                k, v = torch.cat([cache[index][0], k], 2), torch.cat([cache[index][1], v], 2)
            cache[index] = (k, v)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.c.head_dim)
        future = torch.arange(k.shape[2]).unsqueeze(0) > (torch.arange(s) + first).unsqueeze(1)
        att = (torch.softmax(scores.masked_fill(future, float("-inf")), -1) @ v).transpose(1, 2).reshape(b, s, -1)
        x = x + _AllReduceForward.apply(F.linear(att, self.proj.weight)) + self.proj.bias
        h = F.gelu(self.column(self.fc1, self.norm2(x)), approximate="tanh")
        return x + _AllReduceForward.apply(F.linear(h, self.fc2.weight)) + self.fc2.bias

    def column(self, linear, x):  # a column-parallel linear on the replicated x
        if self.async_dgrad:
            return _ColumnLinearAsync.apply(x, linear.weight, linear.bias)
        return linear(_AllReduceBackward.apply(x))


class TorchTPGPT(nn.Module):
    def __init__(self, c, whole, async_dgrad=False):
        super().__init__()
        self.c = c
        self.tok, self.pos = nn.Embedding(c.vocab, c.hidden), nn.Embedding(c.max_seq, c.hidden)
        self.blocks = nn.ModuleList(TorchTPBlock(c, async_dgrad) for _ in range(c.layers))
        self.norm = _norm(c.norm, c.hidden, c.eps)
        self.head = nn.Linear(c.hidden, c.vocab, bias=False)
        with torch.no_grad():  # the whole model's weights, this rank's shards
            self.tok.load_state_dict(whole.token_embedding.state_dict())
            self.pos.load_state_dict(whole.position_embedding.state_dict())
            self.norm.load_state_dict(whole.norm.state_dict())
            self.head.load_state_dict(whole.head.state_dict())
            for mine, w in zip(self.blocks, whole.blocks):
                mine.norm1.load_state_dict(w.norm1.state_dict())
                mine.norm2.load_state_dict(w.norm2.state_dict())
                for col, lin in [(mine.qkv, w.qkv), (mine.fc1, w.fc1)]:
                    col.weight.copy_(lin.weight.chunk(P, 0)[RANK]), col.bias.copy_(lin.bias.chunk(P, 0)[RANK])
                for row, lin in [(mine.proj, w.proj), (mine.fc2, w.fc2)]:
                    row.weight.copy_(lin.weight.chunk(P, 1)[RANK]), row.bias.copy_(lin.bias)

    def forward(self, tokens, cache=None):
        first = 0 if cache is None or cache[0] is None else cache[0][0].shape[2]
        x = self.tok(tokens) + self.pos(torch.arange(first, first + tokens.shape[1]))
        for i, block in enumerate(self.blocks):
            x = block(x, cache, i, first)
        return self.head(self.norm(x))

    def loss(self, tokens, targets):
        return F.cross_entropy(self(tokens).reshape(-1, self.c.vocab), targets.reshape(-1))

    @torch.no_grad()
    def prefill(self, prompt):
        cache = [None] * self.c.layers
        return self(prompt, cache)[:, -1], cache

    @torch.no_grad()
    def decode(self, nxt, cache):
        return self(nxt, cache)[:, -1]


# ---- the measurement ----

def _link_address():
    """(this rank's address for gloo, its interface or None): eth0's under netlab's switch
    topology, where COFUSE_LINK names a switch; the loopback otherwise."""
    if "switch" not in os.environ.get("COFUSE_LINK", ""):
        return "127.0.0.1", None
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", "eth0"], capture_output=True, text=True).stdout
    found = re.search(r"inet (\d+\.\d+\.\d+\.\d+)", out)
    return (found.group(1), "eth0") if found else ("127.0.0.1", None)


def slowest(seconds):
    return COMM.allreduce(seconds, op=MPI.MAX)


def timed(body):
    COMM.Barrier()
    start = time.perf_counter()
    body()
    return slowest(time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--ffn", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=4, help="sequences per training step and per decode step (4)")
    parser.add_argument("--seq", type=int, default=256, help="training sequence length (256)")
    parser.add_argument("--prompt", type=int, default=128, help="prefill length (128)")
    parser.add_argument("--decode", type=int, default=16, help="decode steps per measured generation (16)")
    parser.add_argument("--steps", type=int, default=12, help="measured training steps per way (12)")
    parser.add_argument("--warmup", type=int, default=40, help="unmeasured steps first: auto's tuning (40)")
    parser.add_argument("--sp", action="store_true", help="cofuse's models with sequence parallelism")
    parser.add_argument("--json", help="write the record here (rank 0)")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))

    # gloo's rendezvous and its traffic: rank 0's address on the shaped link under netlab's switch
    # (each rank in its own namespace, eth0 on the link), else the loopback (netlab's shaped one
    # under --topology shared).
    address, interface = _link_address()
    if interface:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", interface)
    os.environ.setdefault("MASTER_ADDR", COMM.bcast(address))
    os.environ["MASTER_PORT"] = str(COMM.bcast(int(os.environ.get("MASTER_PORT", 29500 + os.getpid() % 1000))))
    dist.init_process_group("gloo", rank=RANK, world_size=P)

    c = GPTConfig(vocab=96, hidden=args.hidden, heads=args.heads, ffn=args.ffn, layers=args.layers,
                  max_seq=max(args.seq, args.prompt + args.decode + 1))
    whole = PlainGPT(c, seed=3)
    ways = {
        "cofuse-auto": TensorParallelGPT(c, COMM, sequence_parallel=args.sp, schedule="auto", seed=3),
        "cofuse-serial": TensorParallelGPT(c, COMM, sequence_parallel=args.sp, schedule="serial", seed=3),
        "torch-tp": TorchTPGPT(c, whole),
        "torch-tp-async": TorchTPGPT(c, whole, async_dgrad=True),
    }
    optimizers = {name: torch.optim.AdamW(m.parameters(), lr=1e-4) for name, m in ways.items()}
    g = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, c.vocab, (args.batch, args.seq), generator=g)
    targets = torch.randint(0, c.vocab, (args.batch, args.seq), generator=g)
    prompt = torch.randint(0, c.vocab, (args.batch, args.prompt), generator=g)

    def train(name):
        model, opt = ways[name], optimizers[name]
        opt.zero_grad()
        model.loss(tokens, targets).backward()
        opt.step()

    def generation(name):
        """(prefill seconds, decode seconds per token), each the slowest rank's."""
        model = ways[name]
        COMM.Barrier()
        start = time.perf_counter()
        logits, cache = model.prefill(prompt)
        prefill_s = slowest(time.perf_counter() - start)
        nxt = logits.argmax(-1, keepdim=True)
        COMM.Barrier()
        start = time.perf_counter()
        for _ in range(args.decode):
            nxt = model.decode(nxt, cache).argmax(-1, keepdim=True)
        return prefill_s, slowest(time.perf_counter() - start) / args.decode

    # Per layer: block 0's forward+backward alone, on the hidden states' shape.
    x_whole = torch.randn(args.batch * args.seq, c.hidden, generator=g) * 0.1

    def block(name):
        model = ways[name]
        if name.startswith("torch"):
            x = x_whole.view(args.batch, args.seq, -1).clone().requires_grad_()
            y = model.blocks[0](x)
        else:
            x = model.token_block(x_whole.view(args.batch, args.seq, -1)).clone().requires_grad_()
            y = model.blocks[0](x, args.batch)
        y.sum().backward()

    names = list(ways)
    for i in range(args.warmup):  # auto's race runs on these calls
        for name in names:
            train(name), block(name)
            if i < 34:
                generation(name)
    times = {name: {"train_s": [], "block_s": [], "prefill_s": [], "decode_s": []} for name in names}
    # One phase at a time, the ways interleaved within it (the order reversed every step, so drift
    # hits every way alike). Not train, block and generation in one loop: a training step measured
    # right after a generation ran 1.3-1.5x slower for the plain torch models on an AMD EPYC
    # (Zen 5) VM, and a training job does not generate between its steps.
    def order(step):
        return names if step % 2 == 0 else names[::-1]

    for phase, body in (("train_s", train), ("block_s", block)):
        for i in range(args.steps):
            for name in order(i):
                times[name][phase].append(timed(lambda: body(name)))
    for i in range(args.steps):
        for name in order(i):
            prefill_s, decode_s = generation(name)
            times[name]["prefill_s"].append(prefill_s)
            times[name]["decode_s"].append(decode_s)

    # The output error of each against the float64 model in one process, on the same weights.
    exact = PlainGPT(c, dtype=torch.float64)
    exact.load_state_dict(whole.state_dict())
    fresh = {"cofuse-auto": TensorParallelGPT(c, COMM, sequence_parallel=args.sp, schedule="auto", seed=3),
             "cofuse-serial": TensorParallelGPT(c, COMM, sequence_parallel=args.sp, schedule="serial", seed=3),
             "torch-tp": TorchTPGPT(c, whole), "torch-tp-async": TorchTPGPT(c, whole, async_dgrad=True)}
    with torch.no_grad():
        want = exact(prompt).reshape(-1, c.vocab)
        errors = {}
        for name, model in fresh.items():
            got = model(prompt).reshape(-1, c.vocab)
            if not name.startswith("torch") and args.sp:
                every = COMM.allgather(got)
                got = torch.cat(every)
            errors[name] = ((got.double() - want).norm() / want.norm()).item()
    peak_mb = COMM.allreduce(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, op=MPI.MAX)

    if RANK == 0:
        med = {n: {k: statistics.median(v) for k, v in t.items()} for n, t in times.items()}
        # Each column against the faster plain torch way: the strongest baseline a user would write.
        base = {k: min(med[n][k] for n in names if n.startswith("torch")) for k in med["torch-tp"]}
        print(f"GPT {c.layers} blocks hidden {c.hidden} heads {c.heads} ffn {c.ffn}; {P} ranks; training "
              f"{args.batch}x{args.seq} tokens, prefill {args.batch}x{args.prompt}, decode {args.batch} sequences; "
              f"cofuse {'with' if args.sp else 'without'} sequence parallelism; medians of {args.steps}")
        print(f"{'way':<14} {'train tok/s':>11} {'x torch':>7} {'block ms':>9} {'x torch':>7} {'prefill ms':>10} "
              f"{'x torch':>7} {'decode ms/tok':>13} {'x torch':>7} {'logit err':>9}")
        for n in names:
            m = med[n]
            print(f"{n:<14} {args.batch * args.seq / m['train_s']:>11.0f} {base['train_s'] / m['train_s']:>7.2f} "
                  f"{m['block_s'] * 1e3:>9.2f} {base['block_s'] / m['block_s']:>7.2f} {m['prefill_s'] * 1e3:>10.2f} "
                  f"{base['prefill_s'] / m['prefill_s']:>7.2f} {m['decode_s'] * 1e3:>13.3f} "
                  f"{base['decode_s'] / m['decode_s']:>7.2f} {errors[n]:>9.1e}")
        print(f"peak resident memory of a rank (all four models): {peak_mb:.0f} MiB")
        print("the fused GEMMs auto settled on:")
        for o in cofuse.operations(COMM):
            if o["decided_by"] != "given":
                print(f"  {o['description']}: {o['schedule_name']} ({o['decided_by']})")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"args": vars(args), "ranks": P, "medians": med, "samples": times, "errors": errors,
                           "peak_rss_mib": peak_mb, "cpu": open("/proc/cpuinfo").read().split("model name")[1]
                           .split("\n")[0].strip(" :\t")}, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

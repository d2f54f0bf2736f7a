"""A tensor-parallel GPT-style transformer on cofuse's fused ops (Megatron-LM's layout), for
training with autograd and any torch.optim optimizer, and for inference with a KV cache:
prefill, then decode one token per sequence per step. docs/python.md, "A transformer".

The model is cofuse.plain_gpt's, sharded over P = comm.size ranks:
  attention  qkv: ColumnParallelLinear(hidden -> 3·hidden), rank r holding heads
             r·H/P .. (r+1)·H/P (the whole weight's rows are ordered (head, q|k|v, head_dim));
             attention local to those heads; proj: RowParallelLinear(hidden -> hidden)
  MLP        fc1: ColumnParallelLinear(hidden -> ffn), GeLU (tanh), fc2: RowParallelLinear
  replicated token and position embeddings, the norms, the final norm and the head
Without sequence parallelism every rank holds every token (the row-parallel outputs are
all-reduced: gemm_ar). With it, the tokens (B·S of them, flattened batch-major) are split in P
blocks between the layers: the column-parallel layers gather them (ag_gemm), the row-parallel
ones scatter them (gemm_rs), and the replicated parameters' gradients, each rank's from its own
tokens, are summed over the ranks in backward. Decode always runs without it (B tokens a step).

Every forward, backward and decode step is COLLECTIVE over comm: every rank runs it on the same
tokens. CPU tensors, float32, float64 or bfloat16.
"""
import numpy as np
import torch
from mpi4py import MPI
from torch import nn
from torch.nn import functional as F

import cofuse as _cofuse
from cofuse.plain_gpt import PlainGPT, causal_attention, make_norm, rms_norm
from cofuse.torch import Binding, ColumnParallelLinear, RowParallelLinear, TensorParallelMLP, _linear


class _SumGradOverRanks(torch.autograd.Function):
    """Identity forward; backward sums the gradient over comm's ranks. Applied to a replicated
    parameter where it is used under sequence parallelism, so that its gradient is the whole
    batch's whatever optimizer steps it."""

    @staticmethod
    def forward(ctx, t, comm):
        ctx.comm = comm
        return t.view_as(t)

    @staticmethod
    def backward(ctx, grad):
        wide = grad.detach().to(torch.float32 if grad.dtype is torch.bfloat16 else grad.dtype).contiguous()
        buf = wide.numpy()
        ctx.comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        return torch.from_numpy(buf).to(grad.dtype), None


def _normalise(norm, x, comm, sp):
    """norm (an RMSNorm or nn.LayerNorm) applied to x; under sequence parallelism each rank
    normalised its own tokens, so its parameters' gradients are summed over the ranks."""
    weight, bias = norm.weight, getattr(norm, "bias", None)
    if sp:
        weight = _SumGradOverRanks.apply(weight, comm)
        bias = None if bias is None else _SumGradOverRanks.apply(bias, comm)
    if isinstance(norm, nn.LayerNorm):
        return F.layer_norm(x, (x.shape[-1],), weight, bias, norm.eps)
    return rms_norm(x, weight, norm.eps)


class KVCache:
    """Per layer, the keys and values of this rank's heads for every position so far:
    [B, H/P, length, head_dim] each. Made by TensorParallelGPT.prefill, grown by decode.
    binding: what the decode steps of this cache bind their row-parallel layers' all-reduces to
    (RowParallelLinear.bound_forward): agreed once, at the first step, then only the all-reduce's
    own messages each step."""

    def __init__(self, layers):
        self.keys = [None] * layers
        self.values = [None] * layers
        self.binding = Binding()

    @property
    def length(self):
        return 0 if self.keys[0] is None else self.keys[0].shape[2]

    def extend(self, layer, k, v):
        """Appends k, v [B, H/P, S_new, d] to layer's cache; returns the whole cached keys and values."""
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], 2)
            v = torch.cat([self.values[layer], v], 2)
        self.keys[layer], self.values[layer] = k, v
        return k, v


class TensorParallelBlock(nn.Module):
    """One pre-norm block: x += proj(attention(qkv(norm1(x)))); x += mlp(norm2(x)).
    forward(x, batch, ...): x [B·S, hidden] (flattened batch-major), or its token block r with
    sequence parallelism; batch: B. Returns the same shape."""

    def __init__(self, config, comm, *, sequence_parallel, dtype, schedule, profile):
        super().__init__()
        world = comm.Get_size()
        if config.heads % world:
            raise _cofuse.Error(f"TensorParallelBlock: heads={config.heads} is not divisible by the "
                                f"communicator's {world} ranks")
        self.config = config
        self.comm = comm
        self.local_heads = config.heads // world
        common = dict(sequence_parallel=sequence_parallel, dtype=dtype, schedule=schedule, profile=profile)
        self.norm1 = make_norm(config, dtype)
        self.qkv = ColumnParallelLinear(config.hidden, 3 * config.hidden, comm, **common)
        self.proj = RowParallelLinear(config.hidden, config.hidden, comm, **common)
        self.norm2 = make_norm(config, dtype)
        self.mlp = TensorParallelMLP(config.hidden, config.ffn, comm, **common)
        self.sequence_parallel = sequence_parallel

    def forward(self, x, batch, cache=None, layer_index=0, first_position=0, sequence_parallel=None, binding=None):
        """cache: None (training, or a whole sequence), or the KVCache this block's keys and values
        join (layer_index: its place there); first_position: of x's tokens in their sequences;
        sequence_parallel: None = the block's own setting; binding: the row-parallel layers'
        (RowParallelLinear.forward's), None for functional calls."""
        sp = self.sequence_parallel if sequence_parallel is None else sequence_parallel
        c, hl = self.config, self.local_heads
        qkv = self.qkv(_normalise(self.norm1, x, self.comm, sp), sp)  # [B·S, 3·hidden/P]: every token, local heads
        seq = qkv.shape[0] // batch
        qkv = qkv.view(batch, seq, hl, 3, c.head_dim)
        q, k, v = (qkv[:, :, :, i].transpose(1, 2) for i in range(3))  # [B, H/P, S, d]
        if cache is not None:
            k, v = cache.extend(layer_index, k, v)
        attended = causal_attention(q, k, v, first_position).transpose(1, 2).reshape(batch * seq, hl * c.head_dim)
        x = x + self.proj(attended, sp, binding)
        return x + self.mlp(_normalise(self.norm2, x, self.comm, sp), sp, binding)


class TensorParallelGPT(nn.Module):
    """cofuse.plain_gpt.PlainGPT sharded over comm (module docstring).

    config: a cofuse.plain_gpt.GPTConfig; heads, ffn and, with sequence_parallel, every batch's
      B·S must be divisible by P.
    comm: an mpi4py communicator; every call is collective over it.
    sequence_parallel: split the tokens between the layers (training and prefill).
    dtype: of every parameter (float32, float64 or bfloat16).
    schedule, profile: of every fused GEMM (as ColumnParallelLinear's; "auto" plans and tunes).
    seed: the weights start as PlainGPT(config, seed=seed)'s (made whole on every rank, then
      sharded: any P gives one model); load_whole(plain) copies another PlainGPT's.
    """

    def __init__(self, config, comm, *, sequence_parallel=False, dtype=torch.float32, schedule="auto", profile=None,
                 seed=0):
        super().__init__()
        self.config = config
        self.comm = comm
        self.world = comm.Get_size()
        self.rank = comm.Get_rank()
        self.sequence_parallel = sequence_parallel
        self.token_embedding = nn.Embedding(config.vocab, config.hidden, dtype=dtype)
        self.position_embedding = nn.Embedding(config.max_seq, config.hidden, dtype=dtype)
        self.blocks = nn.ModuleList(
            TensorParallelBlock(config, comm, sequence_parallel=sequence_parallel, dtype=dtype, schedule=schedule,
                                profile=profile) for _ in range(config.layers))
        self.norm = make_norm(config, dtype)
        self.head = nn.Linear(config.hidden, config.vocab, bias=False, dtype=dtype)
        self.load_whole(PlainGPT(config, dtype=dtype, seed=seed))

    # ---- weights ----

    @torch.no_grad()
    def load_whole(self, plain):
        """Copies a PlainGPT's whole weights (of the same config), this rank's shards of the
        parallel layers and all of the replicated ones."""
        if plain.config != self.config:
            raise _cofuse.Error(f"TensorParallelGPT.load_whole: the model's config {plain.config} is not this "
                                f"one's {self.config}")
        for mine, whole in [(self.token_embedding, plain.token_embedding),
                            (self.position_embedding, plain.position_embedding), (self.norm, plain.norm),
                            (self.head, plain.head)]:
            mine.load_state_dict(whole.state_dict())
        for mine, whole in zip(self.blocks, plain.blocks):
            mine.norm1.load_state_dict(whole.norm1.state_dict())
            mine.norm2.load_state_dict(whole.norm2.state_dict())
            for layer, linear in [(mine.qkv, whole.qkv), (mine.proj, whole.proj), (mine.mlp.fc1, whole.fc1),
                                  (mine.mlp.fc2, whole.fc2)]:
                layer.load_whole(linear.weight, linear.bias)

    def pairs(self, plain):
        """(this model's parameter, the same part of plain's parameter) for every parameter: how
        a test or a training script compares the two (values or gradients: shard(whole))."""
        out = []
        for mine, whole in [(self.token_embedding, plain.token_embedding),
                            (self.position_embedding, plain.position_embedding), (self.norm, plain.norm),
                            (self.head, plain.head)]:
            out += [(p, lambda t: t, q) for p, q in zip(mine.parameters(), whole.parameters())]
        for mine, whole in zip(self.blocks, plain.blocks):
            for m, w in [(mine.norm1, whole.norm1), (mine.norm2, whole.norm2)]:
                out += [(p, lambda t: t, q) for p, q in zip(m.parameters(), w.parameters())]
            for layer, linear in [(mine.qkv, whole.qkv), (mine.proj, whole.proj), (mine.mlp.fc1, whole.fc1),
                                  (mine.mlp.fc2, whole.fc2)]:
                out.append((layer.weight, layer.shard_weight, linear.weight))
                out.append((layer.bias, layer.shard_bias, linear.bias))
        return out

    # ---- training ----

    def _check_tokens(self, tokens, sp):
        if tokens.dim() != 2:
            raise _cofuse.Error(f"TensorParallelGPT: tokens must be [B, S], got shape {tuple(tokens.shape)}")
        b, s = tokens.shape
        if s > self.config.max_seq:
            raise _cofuse.Error(f"TensorParallelGPT: {s} tokens per sequence is more than max_seq={self.config.max_seq}")
        if sp and (b * s) % self.world:
            raise _cofuse.Error(f"TensorParallelGPT: with sequence parallelism B·S = {b}·{s} tokens must be divisible "
                                f"by the communicator's {self.world} ranks")

    def token_block(self, t, sequence_parallel=None):
        """This rank's block of a per-token tensor [B, S, ...] flattened to [B·S, ...]: the tokens
        forward returns logits for (all of them without sequence parallelism)."""
        sp = self.sequence_parallel if sequence_parallel is None else sequence_parallel
        flat = t.reshape(-1, *t.shape[2:])
        return flat.chunk(self.world, 0)[self.rank] if sp else flat

    def _replicated(self, param, sp):
        return _SumGradOverRanks.apply(param, self.comm) if sp else param

    def _embed(self, tokens, first_position, sp):
        b, s = tokens.shape
        positions = torch.arange(first_position, first_position + s).expand(b, s)
        if sp:  # only this rank's tokens are embedded
            tokens, positions = self.token_block(tokens, True), self.token_block(positions, True)
        else:
            tokens, positions = tokens.reshape(-1), positions.reshape(-1)
        return (F.embedding(tokens, self._replicated(self.token_embedding.weight, sp)) +
                F.embedding(positions, self._replicated(self.position_embedding.weight, sp)))

    def _logits(self, x, sp):
        return _linear(_normalise(self.norm, x, self.comm, sp), self._replicated(self.head.weight, sp))

    def forward(self, tokens, cache=None, sequence_parallel=None):
        """tokens [B, S] int64, the same on every rank. Returns logits [B·S/P, vocab] for this
        rank's token block (token_block) with sequence parallelism, else [B·S, vocab] for every
        token. cache: a KVCache to fill (prefill) or extend (decode); positions continue from it."""
        return self._forward(tokens, cache, sequence_parallel, None)

    def _forward(self, tokens, cache, sequence_parallel, binding):
        sp = self.sequence_parallel if sequence_parallel is None else sequence_parallel
        self._check_tokens(tokens, sp)
        first = 0 if cache is None else cache.length
        if first + tokens.shape[1] > self.config.max_seq:
            raise _cofuse.Error(f"TensorParallelGPT: position {first + tokens.shape[1] - 1} is past "
                                f"max_seq={self.config.max_seq}")
        x = self._embed(tokens, first, sp)
        for i, block in enumerate(self.blocks):
            x = block(x, tokens.shape[0], cache, i, first, sp, binding)
        return self._logits(x, sp)

    def loss(self, tokens, targets):
        """Cross-entropy of next-token prediction, the mean over every token of the batch:
        returns this rank's share, to call backward on; summed over the ranks it is the whole loss
        with sequence parallelism (whole_loss), and without it every rank's share is the whole."""
        logits = self(tokens)
        total = targets.numel()
        return F.cross_entropy(logits.float(), self.token_block(targets), reduction="sum") / total

    def whole_loss(self, share):
        """The whole batch's loss (a float) from this rank's share (collective)."""
        value = float(share.detach())
        return self.comm.allreduce(value) if self.sequence_parallel else value

    # ---- inference ----

    @torch.no_grad()
    def prefill(self, prompt):
        """Runs the prompt [B, S0] and returns (the last position's logits [B, vocab], every
        rank's; the KVCache). With sequence parallelism where B·S0 divides over the ranks, else
        without (a prompt may have any length)."""
        b, s = prompt.shape
        sp = self.sequence_parallel and (b * s) % self.world == 0
        cache = KVCache(self.config.layers)
        logits = self(prompt, cache, sequence_parallel=sp)
        if sp:  # the last tokens' logits sit on the ranks holding them
            wide = logits.float() if logits.dtype is torch.bfloat16 else logits
            every = np.empty((self.world,) + tuple(wide.shape), dtype=wide.numpy().dtype)
            self.comm.Allgather(np.ascontiguousarray(wide.numpy()), every)
            logits = torch.from_numpy(every.reshape(b * s, -1)).to(logits.dtype)
        return logits.view(b, s, -1)[:, -1], cache

    @torch.no_grad()
    def decode(self, next_tokens, cache):
        """One step: next_tokens [B, 1] at position cache.length; returns logits [B, vocab]. M = B
        rows per fused GEMM, without sequence parallelism. The row-parallel layers' all-reduces
        are bound to the cache (KVCache.binding) at its first step, so that every later step
        sends only their own messages; the weights must not move to new storage while a cache
        decodes (an optimizer's in-place step is fine)."""
        return self._forward(next_tokens, cache, False, cache.binding)

    @torch.no_grad()
    def generate(self, prompt, steps):
        """Greedy: the prompt [B, S0] and `steps` more tokens, by prefill then decode."""
        logits, cache = self.prefill(prompt)
        tokens = [prompt]
        for i in range(steps):
            nxt = logits.argmax(-1, keepdim=True)
            tokens.append(nxt)
            if i + 1 < steps:
                logits = self.decode(nxt, cache)
        return torch.cat(tokens, 1)

"""A small GPT-style model in plain PyTorch, in one process: the reference that cofuse's
tensor-parallel transformer (cofuse.transformer) is checked and trained against. It imports
nothing of cofuse, so a test that compares the two compares cofuse with PyTorch.

The layout is the one cofuse.transformer shards (docs/python.md, "A transformer"):
  tokens [B, S] -> token embedding + learned position embedding -> n_layers pre-norm blocks
  (x += proj(attention(qkv(norm1(x)))); x += fc2(gelu_tanh(fc1(norm2(x))))) -> norm -> head.
  qkv's weight [3·hidden, hidden] has its rows ordered (head, q|k|v, head_dim): the rows of
  one head's q, k and v sit together, so a block of rows is a block of whole heads.
Attention is causal softmax attention, written out (Debian 12's torch 1.13 has no
scaled_dot_product_attention); generation recomputes the whole sequence at every step (no KV
cache), so it also checks cofuse's cached decode path.
"""
import dataclasses
import math

import torch
from torch import nn
from torch.nn import functional as F


@dataclasses.dataclass(frozen=True)
class GPTConfig:
    """The model's sizes. hidden = heads · head_dim; norm: "rms" (RMSNorm) or "layer" (LayerNorm)."""
    vocab: int = 96
    hidden: int = 128
    heads: int = 4
    ffn: int = 512
    layers: int = 2
    max_seq: int = 128
    norm: str = "rms"
    eps: float = 1e-5

    def __post_init__(self):
        if self.hidden % self.heads:
            raise ValueError(f"GPTConfig: hidden={self.hidden} is not divisible by heads={self.heads}")
        if self.norm not in ("rms", "layer"):
            raise ValueError(f"GPTConfig: norm must be 'rms' or 'layer', not {self.norm!r}")

    @property
    def head_dim(self):
        return self.hidden // self.heads


class RMSNorm(nn.Module):
    """x / sqrt(mean(x²) + eps) · weight, over the last dimension (computed in float32 at least)."""

    def __init__(self, size, eps, dtype=torch.float32):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size, dtype=dtype))

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


def rms_norm(x, weight, eps):
    wide = x.float() if x.dtype in (torch.bfloat16, torch.float16) else x
    y = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + eps)
    return y.to(x.dtype) * weight


def make_norm(config, dtype):
    if config.norm == "rms":
        return RMSNorm(config.hidden, config.eps, dtype)
    return nn.LayerNorm(config.hidden, eps=config.eps, dtype=dtype)


def causal_attention(q, k, v, first_position=0):
    """softmax(q·kᵀ/sqrt(d) + causal mask)·v for q [B, H, Sq, d], k and v [B, H, Sk, d], q's rows
    being positions first_position.. of the Sk keys' sequence. Softmax in float32 at least."""
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    sq, sk = q.shape[-2], k.shape[-2]
    future = torch.arange(sk).unsqueeze(0) > (torch.arange(sq) + first_position).unsqueeze(1)
    scores = scores.masked_fill(future, float("-inf"))
    wide = scores.float() if scores.dtype in (torch.bfloat16, torch.float16) else scores
    return torch.matmul(torch.softmax(wide, -1).to(v.dtype), v)


class PlainBlock(nn.Module):
    def __init__(self, config, dtype):
        super().__init__()
        self.config = config
        self.norm1 = make_norm(config, dtype)
        self.qkv = nn.Linear(config.hidden, 3 * config.hidden, dtype=dtype)
        self.proj = nn.Linear(config.hidden, config.hidden, dtype=dtype)
        self.norm2 = make_norm(config, dtype)
        self.fc1 = nn.Linear(config.hidden, config.ffn, dtype=dtype)
        self.fc2 = nn.Linear(config.ffn, config.hidden, dtype=dtype)

    def forward(self, x):  # x [B, S, hidden]
        b, s, _ = x.shape
        c = self.config
        qkv = self.qkv(self.norm1(x)).view(b, s, c.heads, 3, c.head_dim)
        q, k, v = (qkv[:, :, :, i].transpose(1, 2) for i in range(3))  # [B, H, S, d]
        attended = causal_attention(q, k, v).transpose(1, 2).reshape(b, s, c.hidden)
        x = x + self.proj(attended)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x)), approximate="tanh"))


class PlainGPT(nn.Module):
    """The whole model in one process. forward(tokens [B, S] int64) -> logits [B, S, vocab].
    seed: the initial weights (nn.Linear's and nn.Embedding's defaults, embeddings scaled by 0.1)."""

    def __init__(self, config, *, dtype=torch.float32, seed=0):
        super().__init__()
        self.config = config
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.token_embedding = nn.Embedding(config.vocab, config.hidden, dtype=dtype)
            self.position_embedding = nn.Embedding(config.max_seq, config.hidden, dtype=dtype)
            with torch.no_grad():
                self.token_embedding.weight.mul_(0.1)
                self.position_embedding.weight.mul_(0.1)
            self.blocks = nn.ModuleList(PlainBlock(config, dtype) for _ in range(config.layers))
            self.norm = make_norm(config, dtype)
            self.head = nn.Linear(config.hidden, config.vocab, bias=False, dtype=dtype)

    def forward(self, tokens):
        s = tokens.shape[1]
        if s > self.config.max_seq:
            raise ValueError(f"PlainGPT: {s} tokens is more than max_seq={self.config.max_seq}")
        x = self.token_embedding(tokens) + self.position_embedding(torch.arange(s))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    @torch.no_grad()
    def generate(self, prompt, steps):
        """Greedy: the prompt [B, S0] and `steps` more tokens, each from the whole sequence."""
        tokens = prompt
        for _ in range(steps):
            nxt = self(tokens)[:, -1].argmax(-1, keepdim=True)
            tokens = torch.cat([tokens, nxt], 1)
        return tokens

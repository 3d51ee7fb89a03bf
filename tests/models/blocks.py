"""Small models written in plain torch, shared by the model tests and the benchmarks."""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d) + 0.1 * torch.randn(d))
        self.eps = eps

    def forward(self, x):
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype) * self.weight


def rotary(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class TransformerBlock(nn.Module):
    """Pre-norm decoder block: causal attention with rotary embeddings, RMSNorm, SwiGLU, residuals."""

    def __init__(self, d: int = 64, heads: int = 4, hidden: int = 176, max_seq: int = 512) -> None:
        super().__init__()
        self.h, self.dh = heads, d // heads
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)
        self.n1, self.n2 = RMSNorm(d), RMSNorm(d)
        inv = 1.0 / (10000 ** (torch.arange(0, self.dh, 2).float() / self.dh))
        t = torch.arange(max_seq).float()[:, None] * inv[None, :]
        emb = torch.cat((t, t), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, x):
        B, S, D = x.shape
        q, k, v = self.qkv(self.n1(x)).view(B, S, 3, self.h, self.dh).permute(2, 0, 3, 1, 4)
        cos, sin = self.cos[:S].to(x.dtype), self.sin[:S].to(x.dtype)
        q, k = rotary(q, cos, sin), rotary(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(B, S, D))
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def mlp(d_in: int = 64, hidden: int = 200, d_out: int = 10) -> nn.Module:
    return nn.Sequential(nn.Linear(d_in, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, d_out))


def tiny_llama():
    """A tiny Hugging Face Llama (hidden 64, 2 layers, GQA 4/2 heads, vocab 256), random weights."""
    import transformers
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                                   max_position_embeddings=128)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg)

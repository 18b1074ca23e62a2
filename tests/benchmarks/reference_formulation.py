"""The reference formulation of DAPE attention as the papers' authors compute it, for the benchmarks."""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from dape_core.attention import CausalSelfAttention


def reference_attention(layer: CausalSelfAttention, x: torch.Tensor) -> torch.Tensor:
    """Attention as the papers' code computes it (DAPE V2, §3), with `layer`'s weights: the full [B, 2H, T, T]
    and [B, D, T, T] maps, concat over heads, tril, two Conv2d, mask, softmax."""
    batch, length, width = x.shape
    q, k, v = layer.qkv(x).view(batch, length, 3, layer.n_head, layer.head_dim).permute(2, 0, 3, 1, 4)
    scores = q @ k.transpose(-2, -1) / math.sqrt(layer.head_dim)
    positions = torch.arange(length, device=x.device)
    bias = layer.pos.bias(positions, positions).to(scores.dtype)
    future = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
    logits = scores + bias
    proc = layer.processor
    if proc is not None:
        z = torch.cat([scores, bias.expand_as(scores)], dim=1).masked_fill(future, 0.0)  # concat, tril
        logits = logits + proc.conv_out(F.leaky_relu(proc.conv_in(z), negative_slope=0.01))  # two Conv2d
    weights = logits.masked_fill(future, float("-inf")).softmax(dim=-1)
    out = weights @ v
    return layer.proj(out.transpose(1, 2).reshape(batch, length, width))

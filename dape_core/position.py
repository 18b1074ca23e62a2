"""Position encodings (SPEC §2), each a small module behind one interface.

Two kinds exist, and every encoding implements both hooks (the unused one is the identity):
- `rotate(q, k, q_pos, k_pos)`: the rotary family transforms queries and keys before `Q Kᵀ`;
- `bias(q_pos, k_pos)`: additive biases return `[H, T_q, T_k]`; encodings without one return None.

Positions are explicit 1-D tensors so that a block of query rows (the memory-efficient path) or a shifted
window asks for exactly the part of the bias it needs.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .config import ModelConfig


def causal_distance(q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """Δ = i − j below the diagonal and 0 above it (the authors' code zeroes the upper triangle with tril)."""
    return (q_pos[:, None] - k_pos[None, :]).clamp(min=0)


class PositionEncoding(nn.Module):
    """Base: no rotation, no bias (NoPE)."""

    has_bias = False

    def rotate(self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor):
        return q, k

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
        return None


class NoPE(PositionEncoding):
    """Nothing but the causal mask."""


class RoPE(PositionEncoding):
    """Rotary embedding, base 10000, full head dim, half-split rotation.

    cos/sin are computed from the positions on every call, so any evaluation length works (the authors'
    cache covered only the training length).
    """

    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def _rotate(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        angles = pos.to(self.inv_freq.dtype)[:, None] * self.inv_freq[None, :]  # [T, d/2]
        cos = torch.cat([angles.cos(), angles.cos()], dim=-1).to(x.dtype)
        sin = torch.cat([angles.sin(), angles.sin()], dim=-1).to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    def rotate(self, q, k, q_pos, k_pos):
        return self._rotate(q, q_pos), self._rotate(k, k_pos)


def alibi_slopes(n_head: int) -> torch.Tensor:
    """m_k = 2^(−8(k+1)/H) for H a power of two; otherwise the slopes of the nearest lower power of two
    followed by every other slope of the doubled count (Press et al.)."""

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (k + 1) / n) for k in range(n)]

    if math.log2(n_head).is_integer():
        return torch.tensor(power_of_two(n_head))
    lower = 2 ** math.floor(math.log2(n_head))
    extra = power_of_two(2 * lower)[0::2][: n_head - lower]
    return torch.tensor(power_of_two(lower) + extra)


class ALiBi(PositionEncoding):
    """B = −m_h · Δ with fixed (not learnable) slopes."""

    has_bias = True

    def __init__(self, n_head: int):
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(n_head), persistent=False)

    def bias(self, q_pos, k_pos):
        return -self.slopes[:, None, None] * causal_distance(q_pos, k_pos).to(self.slopes.dtype)


class KerpleLog(PositionEncoding):
    """B = −p_h · log(1 + a_h · Δ); p ~ 2·U(0,1), a ~ U(0,1), both clamped to ≥ 0.01 on every forward."""

    has_bias = True
    EPS = 0.01

    def __init__(self, n_head: int):
        super().__init__()
        self.p = nn.Parameter(2 * torch.rand(n_head))
        self.a = nn.Parameter(torch.rand(n_head))

    def bias(self, q_pos, k_pos):
        p = self.p.clamp(min=self.EPS)[:, None, None]
        a = self.a.clamp(min=self.EPS)[:, None, None]
        return -p * torch.log1p(a * causal_distance(q_pos, k_pos).to(p.dtype))


def build_position_encoding(cfg: ModelConfig) -> PositionEncoding:
    """One instance per layer: learnable encodings (Kerple) have per-layer parameters, as in the authors' code."""
    builders = {
        "nope": lambda: NoPE(),
        "rope": lambda: RoPE(cfg.head_dim),
        "alibi": lambda: ALiBi(cfg.n_head),
        "kerple": lambda: KerpleLog(cfg.n_head),
    }
    if cfg.pos_encoding not in builders:
        raise ValueError(f"unknown position encoding {cfg.pos_encoding!r}; valid: {', '.join(builders)}")
    return builders[cfg.pos_encoding]()

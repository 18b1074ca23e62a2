"""ALiBi's torch module (its record: `alibi.py`) and its slopes."""

from __future__ import annotations

import math

import torch

from .base import PositionEncoding


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

    slopes: torch.Tensor  # a buffer (register_buffer): typed for the checker, which cannot see it

    def __init__(self, n_head: int):
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(n_head), persistent=False)

    def bias(self, q_pos, k_pos):
        return -self.slopes[:, None, None] * self.distance(q_pos, k_pos).to(self.slopes.dtype)

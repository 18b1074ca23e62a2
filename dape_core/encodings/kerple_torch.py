"""Kerple's torch modules, logarithmic and power (their records: `kerple.py`)."""

from __future__ import annotations

import torch
from torch import nn

from .base import PositionEncoding


class _Kerple(PositionEncoding):
    """Learnable per-head p and a, p ~ 2·U(0,1), a ~ U(0,1) (the authors' init for both variants).

    The parameters are clamped in place on every forward, as in the authors' code, so they stay in range
    between steps and gradients are never cut by a clamp. The clamp goes through `.data`, which autograd does
    not track: row blocks and recomputation may call `bias` several times in one step.
    """

    EPS = 0.01
    P_MAX: float | None = None

    def __init__(self, n_head: int):
        super().__init__()
        self.p = nn.Parameter(2 * torch.rand(n_head))
        self.a = nn.Parameter(torch.rand(n_head))

    def clamp_parameters(self) -> None:
        self.p.data.clamp_(min=self.EPS, max=self.P_MAX)
        self.a.data.clamp_(min=self.EPS)


class KerpleLog(_Kerple):
    """B = −p_h · log(1 + a_h · Δ); p, a ≥ 0.01."""

    def bias(self, q_pos, k_pos):
        self.clamp_parameters()
        distance = self.distance(q_pos, k_pos).to(self.p.dtype)
        return -self.p[:, None, None] * torch.log1p(self.a[:, None, None] * distance)


class KerplePower(_Kerple):
    """B = −a_h · Δ^{p_h}; p ∈ [0.01, 2], a ≥ 0.01."""

    P_MAX = 2.0

    def bias(self, q_pos, k_pos):
        self.clamp_parameters()
        distance = self.distance(q_pos, k_pos).to(self.p.dtype)
        # Δ^p through Δ ≥ 1 only: at Δ = 0 the gradient of Δ^p with respect to p would be 0·log 0.
        power = distance.clamp(min=1.0)[None] ** self.p[:, None, None]
        return -self.a[:, None, None] * torch.where(distance > 0, power, torch.zeros_like(power))

"""FIRE's torch module (its record: `fire.py`)."""

from __future__ import annotations

import torch
from torch import nn

from .base import PositionEncoding


class FIRE(PositionEncoding):
    """B = MLP(ψ(Δ) / (ψ(max(i, L)) + 1e-6)), ψ(x) = log(|c·x| + 1), L = |λ·L₀| (Li et al. 2023).

    Learnable c (init 0.1) and λ (init 1); MLP Linear(1, W) → ReLU → Linear(W, H) with PyTorch's default
    init. Decisions D8, D9: W is FIRE's own width (`fire_width`, default 32), independent of D_dape; L₀
    defaults to the training length. One module per layer, like Kerple.
    """

    def __init__(self, n_head: int, width: int, threshold: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(1, width), nn.ReLU(), nn.Linear(width, n_head))
        self.c = nn.Parameter(torch.tensor(0.1))
        self.lam = nn.Parameter(torch.tensor(1.0))
        self.threshold = float(threshold)

    def _psi(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(torch.abs(self.c * x) + 1)

    def bias(self, q_pos, k_pos):
        dtype = self.c.dtype
        distance = self.distance(q_pos, k_pos).to(dtype)
        horizon = torch.maximum(q_pos.to(dtype), torch.abs(self.lam * self.threshold))  # [T_q]
        normalized = self._psi(distance) / (self._psi(horizon)[:, None] + 1e-6)
        return self.mlp(normalized.unsqueeze(-1)).permute(2, 0, 1)

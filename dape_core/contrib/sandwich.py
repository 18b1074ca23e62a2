"""Sandwich (Chi et al. 2022, "Dissecting Transformer Length Extrapolation via the Lens of Receptive Field
Analysis"): the inner product of two sinusoidal position embeddings as a bias, which decays with the distance
like ALiBi's but smoothly, and needs no parameters.

B_h(Δ) = m_h · (Σ_k cos(Δ · ω_k) − d'/2), ω_k = 10000^(−2k/d') for k = 0..d'/2 − 1, m_h ALiBi's slopes:
0 at Δ = 0 and negative beyond; d' is the option `model.options.sandwich_dim` (default 128). Our reading: the
paper compresses the sinusoids' period per head, ALiBi's slopes here do the per-head scaling.

This file is the whole of the encoding: it was added to the product through the public API
(dape_core/components.py) and touches no other file (tests/test_components.py checks that).
"""

from __future__ import annotations

from typing import Annotated

import torch
from pydantic import AfterValidator, Field

from dape_core.components import Cost, Encoding, Setting, register_encoding
from dape_core.encodings.alibi_torch import alibi_slopes
from dape_core.encodings.base import PositionEncoding


class Sandwich(PositionEncoding):
    """The sinusoids' inner product minus its value at Δ = 0, times a per-head slope (a bias of Δ alone)."""

    slopes: torch.Tensor  # buffers (register_buffer): typed for the checker, which cannot see them
    frequencies: torch.Tensor

    def __init__(self, n_head: int, dim: int):
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(n_head), persistent=False)
        self.register_buffer("frequencies", 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float32) / dim),
                             persistent=False)

    def bias(self, q_pos, k_pos):
        distance = self.distance(q_pos, k_pos).to(self.frequencies.dtype)
        inner = torch.cos(distance[..., None] * self.frequencies).sum(-1) - self.frequencies.numel()
        return self.slopes[:, None, None] * inner


def _even(value: int) -> int:
    if value % 2:
        raise ValueError(f"must be even (sine and cosine pairs), got {value}")
    return value


PositiveEven = Annotated[int, Field(gt=0), AfterValidator(_even)]

register_encoding(Encoding(
    "sandwich", "Sandwich", "bias", lambda cfg: Sandwich(cfg.n_head, cfg.option("sandwich_dim")), toeplitz=True,
    settings=(Setting("sandwich_dim", PositiveEven, 128, label="Sandwich's sinusoid dimension"),),
    cost=lambda cfg: Cost(macs=cfg.option("sandwich_dim") // 2)))  # one cosine per frequency and entry

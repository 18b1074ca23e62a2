"""T5's torch module and its bucketing (their record: `t5.py`, whose builder gives the bucket count and the
largest distance, `T5_BUCKETS` and `T5_MAX_DISTANCE`)."""

from __future__ import annotations

import math

import torch
from torch import nn

from .base import PositionEncoding


def t5_causal_bucket(distance: torch.Tensor, buckets: int, max_distance: int) -> torch.Tensor:
    """T5's unidirectional bucketing of Δ ≥ 0: exact below buckets/2, log-spaced up to max_distance, then the
    last bucket."""
    exact = buckets // 2
    far = distance.clamp(min=exact).float()
    log_bucket = exact + (torch.log(far / exact) / math.log(max_distance / exact) * (buckets - exact)).long()
    return torch.where(distance < exact, distance, log_bucket.clamp(max=buckets - 1))


class T5Bias(PositionEncoding):
    """B = table[bucket(Δ)] · √d: 32 causal buckets, max distance 128, one learned `[buckets, H]` table shared
    by all layers (docs/method.md §2; the scale √d follows the authors' code). The table starts at N(0, 0.02²), the
    init of the model's other embeddings (the spec is silent)."""

    def __init__(self, n_head: int, head_dim: int, buckets: int, max_distance: int):
        super().__init__()
        self.table = nn.Parameter(0.02 * torch.randn(buckets, n_head))
        self.scale = math.sqrt(head_dim)
        self.buckets, self.max_distance = buckets, max_distance

    def bias(self, q_pos, k_pos):
        bucket = t5_causal_bucket(self.distance(q_pos, k_pos), self.buckets, self.max_distance)
        return (self.table[bucket] * self.scale).permute(2, 0, 1)

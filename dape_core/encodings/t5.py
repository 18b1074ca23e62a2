"""T5's relative bias (docs/method.md §2): a learned table over causal distance buckets, shared by all layers."""

from __future__ import annotations

import math
from functools import cache
from types import SimpleNamespace
from typing import TYPE_CHECKING

from ..registry import Encoding

if TYPE_CHECKING:
    import torch

T5_BUCKETS, T5_MAX_DISTANCE = 32, 128  # docs/method.md §2 constants, not study parameters


def _learned(cfg) -> int:
    return T5_BUCKETS * cfg.n_head  # the [buckets, H] table


def t5_causal_bucket(distance: torch.Tensor, buckets: int = T5_BUCKETS,
                     max_distance: int = T5_MAX_DISTANCE) -> torch.Tensor:
    """T5's unidirectional bucketing of Δ ≥ 0: exact below buckets/2, log-spaced up to max_distance, then the
    last bucket."""
    import torch

    exact = buckets // 2
    far = distance.clamp(min=exact).float()
    log_bucket = exact + (torch.log(far / exact) / math.log(max_distance / exact) * (buckets - exact)).long()
    return torch.where(distance < exact, distance, log_bucket.clamp(max=buckets - 1))


@cache
def modules() -> SimpleNamespace:
    """The torch module (T5Bias), defined the first time a model is built: the record
    below loads without torch (validating a study reads it)."""
    import torch
    from torch import nn  # noqa: F401 (the modules' layers)

    from .base import PositionEncoding

    class T5Bias(PositionEncoding):
        """B = table[bucket(Δ)] · √d: 32 causal buckets, max distance 128, one learned `[buckets, H]` table shared
        by all layers (docs/method.md §2; the scale √d follows the authors' code). The table starts at N(0, 0.02²), the
        init of the model's other embeddings (the spec is silent)."""


        def __init__(self, n_head: int, head_dim: int, buckets: int = T5_BUCKETS, max_distance: int = T5_MAX_DISTANCE):
            super().__init__()
            self.table = nn.Parameter(0.02 * torch.randn(buckets, n_head))
            self.scale = math.sqrt(head_dim)
            self.buckets, self.max_distance = buckets, max_distance

        def bias(self, q_pos, k_pos):
            bucket = t5_causal_bucket(self.distance(q_pos, k_pos), self.buckets, self.max_distance)
            return (self.table[bucket] * self.scale).permute(2, 0, 1)

    return SimpleNamespace(T5Bias=T5Bias)


T5 = Encoding("t5", "T5 bias", "bias", lambda cfg: modules().T5Bias(cfg.n_head, cfg.head_dim), toeplitz=True,
              learned=_learned, shared=True)

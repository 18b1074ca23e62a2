"""T5's relative bias (docs/method.md §2): a learned table over causal distance buckets, shared by all layers.
The record; its torch module is `t5_torch.py`, imported when a model is built (the record loads without torch:
validating a study reads it)."""

from __future__ import annotations

from ..registry import Encoding

T5_BUCKETS, T5_MAX_DISTANCE = 32, 128  # docs/method.md §2 constants, not study parameters


def _learned(cfg) -> int:
    return T5_BUCKETS * cfg.n_head  # the [buckets, H] table


def _build(cfg):
    from .t5_torch import T5Bias

    return T5Bias(cfg.n_head, cfg.head_dim, T5_BUCKETS, T5_MAX_DISTANCE)


T5 = Encoding("t5", "T5 bias", "bias", _build, toeplitz=True, learned=_learned, shared=True)

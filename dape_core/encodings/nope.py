"""NoPE (docs/method.md §2): no position information but the causal mask. The record; its torch module is
`nope_torch.py`, imported when a model is built (the record loads without torch: validating a study reads it)."""

from __future__ import annotations

from ..registry import Encoding


def _build(cfg):
    from .nope_torch import NoPE

    return NoPE()


NOPE = Encoding("nope", "NoPE", "none", _build)

"""ALiBi (docs/method.md §2): B = −m_h · Δ with fixed per-head slopes. The record; its torch module is
`alibi_torch.py`, imported when a model is built (the record loads without torch: validating a study reads it)."""

from __future__ import annotations

from ..registry import Encoding


def _build(cfg):
    from .alibi_torch import ALiBi

    return ALiBi(cfg.n_head)


ALIBI = Encoding("alibi", "ALiBi", "bias", _build, toeplitz=True)

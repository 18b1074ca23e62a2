"""Kerple (docs/method.md §2.7, Decision D7): the logarithmic and the power variants, learnable p and a per
head and layer. The records; their torch modules are `kerple_torch.py`, imported when a model is built (the
records load without torch: validating a study reads them)."""

from __future__ import annotations

from ..registry import Encoding


def _learned(cfg) -> int:
    return 2 * cfg.n_head  # p and a per head


def _build_log(cfg):
    from .kerple_torch import KerpleLog

    return KerpleLog(cfg.n_head)


def _build_power(cfg):
    from .kerple_torch import KerplePower

    return KerplePower(cfg.n_head)


KERPLE = Encoding("kerple", "Kerple", "bias", _build_log, toeplitz=True, learned=_learned)
KERPLE_POWER = Encoding("kerple_power", "Kerple (power)", "bias", _build_power, toeplitz=True, learned=_learned)

"""FIRE (Li et al. 2023; docs/method.md §2, Decisions D8, D9): a learned MLP of the normalised distance. The
record; its torch module is `fire_torch.py`, imported when a model is built (the record loads without torch:
validating a study reads it)."""

from __future__ import annotations

from ..registry import Encoding, Setting

FIRE_DEFAULT_WIDTH = 32  # the MLP's width W when a study gives none (Decision D8)


def _learned(cfg) -> int:
    w = cfg.fire_width
    return 2 + (w + w) + (w * cfg.n_head + cfg.n_head)  # c, λ, Linear(1, W), Linear(W, H)


def _build(cfg):
    from .fire_torch import FIRE

    return FIRE(cfg.n_head, cfg.fire_width, cfg.fire_threshold)


FIRE = Encoding(
    "fire", "FIRE", "bias", _build,
    settings=(Setting("fire_width", label="FIRE width", field=True), Setting("fire_l0", label="FIRE L₀", field=True)),
    defaults={"fire_l0": "train_length"}, learned=_learned)

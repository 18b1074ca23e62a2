"""The rotary family (docs/method.md §2.3–2.5): RoPE, YaRN (RoPE scaled at evaluation, Decision D5) and
randomized RoPE (Decision D6). The records; their torch modules, one each built on RoPE's rotation, are
`rope_torch.py`, imported when a model is built (the records load without torch: validating a study reads them)."""

from __future__ import annotations

from ..registry import Encoding, Setting


def _build_rope(cfg):
    from .rope_torch import RoPE

    return RoPE(cfg.head_dim)


def _build_yarn(cfg):
    from .rope_torch import YaRN

    return YaRN(cfg.head_dim, cfg.train_length)


def _build_random(cfg):
    from .rope_torch import RandomizedRoPE

    return RandomizedRoPE(cfg.head_dim, cfg.random_positions_max)


ROPE = Encoding("rope", "RoPE", "rotary", _build_rope)
YARN = Encoding("yarn", "YaRN", "rotary", _build_yarn)
ROPE_RANDOM = Encoding(
    "rope_random", "randomized RoPE", "rotary", _build_random,
    settings=(Setting("rope_random_max", label="randomized RoPE's longest length", field=True),),
    defaults={"rope_random_max": "longest"})

"""The position encodings of docs/method.md §2, one record each: every fact about an encoding that more than its
module needs lives here, and the modules that act on it read it (`config.py`: the names a study may give, the
checks and the analytic parameter count; `position.py`: the module it builds; `applicability.py`: the settings
it reads; `fused`: whether the fused kernels take it; the orchestrator's estimates and report labels).

It loads without torch: validating a study reads it. What an encoding computes is `position.py`'s (its
`rotate` / `bias(q_pos, k_pos)` hooks); this says what kind it is and what it needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal

# docs/method.md §2 constants that are not study parameters.
FIRE_DEFAULT_WIDTH = 32
T5_BUCKETS, T5_MAX_DISTANCE = 32, 128


def _none(cfg) -> int:
    return 0


def _kerple(cfg) -> int:
    return 2 * cfg.n_head  # p and a per head


def _fire(cfg) -> int:
    w = cfg.fire_width
    return 2 + (w + w) + (w * cfg.n_head + cfg.n_head)  # c, λ, Linear(1, W), Linear(W, H)


def _t5(cfg) -> int:
    return T5_BUCKETS * cfg.n_head  # the [buckets, H] table


@dataclass(frozen=True)
class Encoding:
    """What one position encoding is.

    kind: `rotary` transforms q and k before `Q Kᵀ` (the `rotate` hook), `bias` adds B = [H, T_q, T_k] (the
        `bias` hook), `none` neither.
    toeplitz: its bias depends on the distance Δ alone, so the fused kernels read it from a table of Δ (the
        fused path takes every encoding but a bias of more than Δ: FIRE's).
    settings: the `model:` fields only this encoding reads (marked not applicable for the others).
    defaults: of those, the ones an experiment fills in when not given: field -> `longest` (the largest
        evaluation length) or `train_length`.
    learned: its learned parameters, of one module (`ModelConfig` -> count).
    shared: one module for all layers (else one per layer, each with its own parameters).
    """

    name: str
    label: str  # in words, for reports
    kind: Literal["none", "rotary", "bias"]
    toeplitz: bool = False
    settings: tuple[str, ...] = ()
    defaults: dict[str, Literal["longest", "train_length"]] = field(default_factory=dict)
    learned: Callable[..., int] = _none  # (a ModelConfig) -> count
    shared: bool = False

    @property
    def has_bias(self) -> bool:
        return self.kind == "bias"

    @property
    def rotary(self) -> bool:
        return self.kind == "rotary"

    @property
    def fused(self) -> bool:
        """The fused attention kernels (`dape_core.fused`) can compute a layer with this encoding."""
        return not self.has_bias or self.toeplitz


# The order is the order a study's error message lists them in.
ENCODINGS: dict[str, Encoding] = {e.name: e for e in (
    Encoding("nope", "NoPE", "none"),
    Encoding("rope", "RoPE", "rotary"),
    Encoding("alibi", "ALiBi", "bias", toeplitz=True),
    Encoding("kerple", "Kerple", "bias", toeplitz=True, learned=_kerple),
    Encoding("kerple_power", "Kerple (power)", "bias", toeplitz=True, learned=_kerple),
    Encoding("fire", "FIRE", "bias", settings=("fire_width", "fire_l0"), defaults={"fire_l0": "train_length"},
             learned=_fire),
    Encoding("t5", "T5 bias", "bias", toeplitz=True, learned=_t5, shared=True),
    Encoding("yarn", "YaRN", "rotary"),
    Encoding("rope_random", "randomized RoPE", "rotary", settings=("rope_random_max",),
             defaults={"rope_random_max": "longest"}),
)}
ENCODING_SETTINGS = frozenset(name for encoding in ENCODINGS.values() for name in encoding.settings)

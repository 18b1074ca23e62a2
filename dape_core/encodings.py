"""The position encodings of docs/method.md §2, one record each (`dape_core.registry.Encoding`): every fact
about an encoding that more than its module needs lives here, and the modules that act on it read it through
the registry (`config.py`: the names a study may give, the checks and the analytic parameter count;
`position.py`: the module it builds; `applicability.py`: the settings it reads; `fused`: whether the fused
kernels take it; the orchestrator's estimates and report labels).

It loads without torch: validating a study reads it. What an encoding computes is `position.py`'s (its
`rotate` / `bias(q_pos, k_pos)` hooks), built by the record's `build`; this says what kind it is and what it
needs.
"""

from __future__ import annotations

from .registry import Encoding, Setting, encodings, register_encoding

# docs/method.md §2 constants that are not study parameters.
FIRE_DEFAULT_WIDTH = 32
T5_BUCKETS = 32  # position.T5_BUCKETS, here without torch (the parameter count reads it)


def _none(cfg) -> int:
    return 0


def _kerple(cfg) -> int:
    return 2 * cfg.n_head  # p and a per head


def _fire(cfg) -> int:
    w = cfg.fire_width
    return 2 + (w + w) + (w * cfg.n_head + cfg.n_head)  # c, λ, Linear(1, W), Linear(W, H)


def _t5(cfg) -> int:
    return T5_BUCKETS * cfg.n_head  # the [buckets, H] table


def _position():
    """dape_core.position, imported when a model is built (validating a study loads no torch)."""
    from . import position

    return position


# The order is the order a study's error message lists them in.
for _record in (
    Encoding("nope", "NoPE", "none", lambda cfg: _position().NoPE()),
    Encoding("rope", "RoPE", "rotary", lambda cfg: _position().RoPE(cfg.head_dim)),
    Encoding("alibi", "ALiBi", "bias", lambda cfg: _position().ALiBi(cfg.n_head), toeplitz=True),
    Encoding("kerple", "Kerple", "bias", lambda cfg: _position().KerpleLog(cfg.n_head), toeplitz=True,
             learned=_kerple),
    Encoding("kerple_power", "Kerple (power)", "bias", lambda cfg: _position().KerplePower(cfg.n_head),
             toeplitz=True, learned=_kerple),
    Encoding("fire", "FIRE", "bias", lambda cfg: _position().FIRE(cfg.n_head, cfg.fire_width, cfg.fire_threshold),
             settings=(Setting("fire_width", label="FIRE width", field=True),
                       Setting("fire_l0", label="FIRE L₀", field=True)),
             defaults={"fire_l0": "train_length"}, learned=_fire),
    Encoding("t5", "T5 bias", "bias", lambda cfg: _position().T5Bias(cfg.n_head, cfg.head_dim), toeplitz=True,
             learned=_t5, shared=True),
    Encoding("yarn", "YaRN", "rotary", lambda cfg: _position().YaRN(cfg.head_dim, cfg.train_length)),
    Encoding("rope_random", "randomized RoPE", "rotary",
             lambda cfg: _position().RandomizedRoPE(cfg.head_dim, cfg.random_positions_max),
             settings=(Setting("rope_random_max", label="randomized RoPE's longest length", field=True),),
             defaults={"rope_random_max": "longest"}),
):
    register_encoding(_record)

ENCODINGS = encodings  # the registry (dape_core/registry.py): these, contrib's and plugins'
BUILTIN_ENCODINGS = tuple(record.name for record in encodings.values())
ENCODING_SETTINGS = frozenset(name for record in encodings.values() for name in record.settings)

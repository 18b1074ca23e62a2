"""The position encodings of docs/method.md §2, each two files side by side: its record (`kerple.py`, a
`dape_core.registry.Encoding`: every fact about it that more than its module needs, which the config, the
applicability rule, the fused path, the estimates and the reports read through the registry) and its torch
module (`kerple_torch.py`: the `rotate` / `bias(q_pos, k_pos)` hooks of `base.PositionEncoding`, classes at the
top of the file), which the record's builder imports when a model is built.

Importing this package registers the records, in the order a study's error message lists them in; it loads
without torch (validating a study reads it). `base.py` (torch) builds a model's encodings from the records;
`PositionEncoding`, the class an encoding derives from, is imported from it on first use, with torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_attributes
from ..registry import encodings, register_encoding
from . import alibi, fire, kerple, nope, rope, t5

for _record in (nope.NOPE, rope.ROPE, alibi.ALIBI, kerple.KERPLE, kerple.KERPLE_POWER, fire.FIRE, t5.T5, rope.YARN,
                rope.ROPE_RANDOM):
    register_encoding(_record)

FIRE_DEFAULT_WIDTH = fire.FIRE_DEFAULT_WIDTH
ENCODINGS = encodings  # the registry (dape_core/registry.py): these, contrib's and plugins'
BUILTIN_ENCODINGS = tuple(record.name for record in encodings.values())
ENCODING_SETTINGS = frozenset(name for record in encodings.values() for name in record.settings)
__all__ = ["BUILTIN_ENCODINGS", "ENCODINGS", "ENCODING_SETTINGS", "FIRE_DEFAULT_WIDTH", "PositionEncoding"]

if TYPE_CHECKING:
    from .base import PositionEncoding as PositionEncoding

__getattr__, __dir__ = lazy_attributes(__name__, {"PositionEncoding": "base"})  # torch: imported on first use

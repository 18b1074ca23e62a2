"""NoPE (docs/method.md §2): no position information but the causal mask."""

from __future__ import annotations

from functools import cache
from types import SimpleNamespace

from ..registry import Encoding


@cache
def modules() -> SimpleNamespace:
    """The torch module (NoPE), defined the first time a model is built: the record
    below loads without torch (validating a study reads it)."""
    from torch import nn  # noqa: F401 (the modules' layers)

    from .base import PositionEncoding

    class NoPE(PositionEncoding):
        """Nothing but the causal mask."""

    return SimpleNamespace(NoPE=NoPE)


NOPE = Encoding("nope", "NoPE", "none", lambda cfg: modules().NoPE())

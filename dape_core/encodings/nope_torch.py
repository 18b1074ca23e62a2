"""NoPE's torch module (its record: `nope.py`)."""

from __future__ import annotations

from .base import PositionEncoding


class NoPE(PositionEncoding):
    """Nothing but the causal mask."""

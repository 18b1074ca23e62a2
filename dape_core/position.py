"""Deprecated: `dape_core.position` held the position encodings until they moved to `dape_core/encodings/`
(one file per encoding). Its documented name, `PositionEncoding` (docs/extending.md until then), still
imports from here, with a DeprecationWarning, for one release; import it from `dape_core.encodings` instead.
Loads without torch until the name is asked for."""

from __future__ import annotations

import warnings

from . import encodings

MOVED = {"PositionEncoding": "dape_core.encodings"}  # old name -> its home now
__all__: list[str] = []  # nothing new is declared here: the moved names are dape_core.encodings'


def __getattr__(name: str):
    if name not in MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"dape_core.position.{name} is deprecated: import it from {MOVED[name]} "
                  f"(`from {MOVED[name]} import {name}`); the old name goes in the next release",
                  DeprecationWarning, stacklevel=2)
    return getattr(encodings, name)

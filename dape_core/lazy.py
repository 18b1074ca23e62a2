"""Package attributes imported on first use (PEP 562), so that a package's light modules (its config
sections) can be imported without its heavy ones (torch)."""

from __future__ import annotations

import importlib
from typing import Callable


def lazy_attributes(package: str, table: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package`, whose public `name` lives in submodule `table[name]`."""
    module = importlib.import_module(package)

    def __getattr__(name: str):
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{table[name]}"), name)
        setattr(module, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(module)) | set(table))

    return __getattr__, __dir__

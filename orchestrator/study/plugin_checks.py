"""A study's plugins at load time: loaded before the study is validated (so that the names they register are
valid); their components are then checked against the component contract over the study's resolved trials
(contract_checks.py), so that a plugin that breaks it is refused before anything launches. Every problem
names the plugin and says what is wrong; a study without plugins loads nothing here, torch included.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dape_core.plugins import Plugin, load_all


def load_plugins(specs: Any, folder: Path | str) -> tuple[list[Plugin], list[str]]:
    """(the plugins loaded, the problems of those that could not be), `specs` as the study gives them."""
    if specs is None:
        return [], []
    if not isinstance(specs, list) or not all(isinstance(spec, str) for spec in specs):
        return [], [f"plugins: expected a list of module names or .py files, got {specs!r}"]
    return load_all(specs, folder)

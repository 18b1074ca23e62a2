"""A study's plugins at load time: loaded before the study is validated (so that the names they register are
valid), then their components audited for causality over the study's resolved trials, so that a plugin that
leaks the future is refused before anything launches (dape_core/plugins.py, dape_core/audit.py). Every
problem names the plugin and says what is wrong; a study without plugins loads nothing here, torch included.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dape_core.plugins import Plugin, load_all

MAX_AUDITS = 32  # distinct model configs audited per study (each a small model's few forwards)


def load_plugins(specs: Any, folder: Path | str) -> tuple[list[Plugin], list[str]]:
    """(the plugins loaded, the problems of those that could not be), `specs` as the study gives them."""
    if specs is None:
        return [], []
    if not isinstance(specs, list) or not all(isinstance(spec, str) for spec in specs):
        return [], [f"plugins: expected a list of module names or .py files, got {specs!r}"]
    return load_all(specs, folder)


def _owners(model) -> set[str]:
    return {model.encoding.owner, model.processor_facts.owner, model.form_facts.owner}


def plugin_problems(plugins: list[Plugin], trials: list) -> list[str]:
    """The causality audit of every distinct model config of `trials` (ResolvedTrial) that uses a component
    of `plugins`: a leak is reported with the plugin, the component, the row and the position that leaked."""
    if not plugins:
        return []
    from dape_core.audit import future_leak

    modules = {plugin.module: plugin for plugin in plugins}
    problems: list[str] = []
    seen: set[str] = set()
    for trial in trials:
        model = trial.config.model
        used = _owners(model) & set(modules)
        key = json.dumps(model.to_dict(), sort_keys=True, default=str)
        if not used or key in seen or len(seen) >= MAX_AUDITS:
            continue
        seen.add(key)
        leak = future_leak(model)
        if leak is not None:
            names = "; ".join(f"{modules[m].spec!r} ({modules[m].describe()})" for m in sorted(used))
            problems.append(f"plugins: {names} leaks the future in {trial.where} (processor {model.processor!r}, "
                            f"encoding {model.pos_encoding!r}): {leak}. Without model.leak, a component may read "
                            "no later token")
    return problems

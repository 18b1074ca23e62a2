"""The component contract (dape_core/contract.py) over a study's resolved trials, before anything launches.

- `model.leak` on components none of which declares the `leak` setting: refused for every trial, on every
  loading of the study (no torch needed).
- The contract's checks (causality with random parameters, block paths, parameter count, cost, determinism):
  on every loading, for the trials that use a plugin's component (so `run`, `plan`, ... refuse a broken plugin
  too); at `orchestrator validate`, for every trial's components, built-in ones included (`everything`).

Each distinct set of components and settings is checked once (`dape_core.contract.key`), at most
MAX_CHECKED per study (each a fraction of a second). A problem names the trial, the component with its owner
(a plugin's module, or built-in), the check, and what failed; docs/extending.md says what each one means.

A pass is remembered (`Passed`): the contract is deterministic (fixed parameter draws, one thread), so the same
code (dape_core's files and the study's plugins, by content: code_identity.py), the same torch and the same model
the checks build give the same result. The next `validate` of an unchanged study then builds nothing (and loads no torch
where no plugin does); a change to any file of dape_core, to a plugin, or to the model checks it again.
Refusals are never remembered.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from dape_core.contract import key, leak_refusal, small_config

from .code_identity import HashCache, code_fingerprint, write_cache

if TYPE_CHECKING:
    from dape_core import ModelConfig

MAX_CHECKED = 32  # distinct component configs checked per study
SEE = 'See docs/extending.md, "The contract"'  # what each refusal means, and how to fix it


def _model(trial) -> ModelConfig:
    """The model a trial trains: a CHE task's is shaped for the task (vocabulary, bidirectional encoder)."""
    config = trial.config
    return config.che.model_config(config.model) if config.che is not None else config.model


def _owners(model) -> set[str]:
    return {model.encoding.owner, model.processor_facts.owner, model.form_facts.owner}


def checked_models(trials: list, modules: set[str], everything: bool = False) -> list[tuple[str, ModelConfig]]:
    """(where, model) of each distinct component config of `trials` (ResolvedTrial) the contract builds a model
    for: those using a component of the plugin modules `modules`, or all with `everything`; the leak rule's
    refusals are left out (they build nothing)."""
    checked: dict[str, tuple[str, ModelConfig]] = {}
    for trial in trials:
        model = _model(trial)
        if leak_refusal(model) is not None or (not everything and not _owners(model) & modules):
            continue
        if len(checked) < MAX_CHECKED:
            checked.setdefault(key(model), (trial.where, model))
    return list(checked.values())


def contract_problems(trials: list, plugins: list | tuple = (), everything: bool = False) -> list[str]:
    """The contract's refusals over `trials` (ResolvedTrial): the leak rule for all; the checks that build a
    model for those using a component of `plugins` (Plugin), or for all with `everything`."""
    problems = [f"{trial.where}: model.leak: {refused}" for trial in trials
                if (refused := leak_refusal(_model(trial))) is not None]
    models = checked_models(trials, {plugin.module for plugin in plugins}, everything)
    if not models:
        return problems
    passed = Passed(Passed.default_path(), code_fingerprint([plugin.payload() for plugin in plugins]).digest)
    models = [(where, model) for where, model in models if not passed.known(model)]
    if models:
        from dape_core.contract import refusals  # torch: only where a model is built

        for where, model in models:
            found = refusals(model)
            problems += [f"{where}: {refusal}. {SEE}" for refusal in found]
            if not found:
                passed.add(model)
        passed.save()
    return problems


def _torch_version() -> str:
    """The installed torch's version, read without importing it (another torch: checked again)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return ""


class Passed:
    """The model configs the contract passed with this code (and torch), kept in a JSON file between processes
    (keys: the sha256 of the code's digest, torch's version and the whole config the checks build). Damaged,
    unreadable or unwritable: the checks simply run. `DAPE_CONTRACT_CACHE=off` turns it off."""

    KEPT = 2000  # the latest first

    def __init__(self, path: Path | None, code: str):
        self.path, self.code = (None if os.environ.get("DAPE_CONTRACT_CACHE") == "off" else path), code
        self.keys: list[str] = []
        self.added = False
        try:
            stored = json.loads(self.path.read_text(encoding="utf-8")) if self.path is not None else []
            self.keys = [str(item) for item in stored] if isinstance(stored, list) else []
        except (OSError, ValueError):
            pass

    @staticmethod
    def default_path() -> Path:
        return HashCache.default_path().with_name("contract_passed.json")

    def _key(self, model: ModelConfig) -> str | None:
        try:
            built = small_config(model).to_dict()  # what the checks build (a model that builds none: checked)
        except ValueError:
            return None
        text = json.dumps([self.code, _torch_version(), key(model), built], sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def known(self, model: ModelConfig) -> bool:
        found = self._key(model)
        return self.path is not None and found is not None and found in self.keys

    def add(self, model: ModelConfig) -> None:
        found = self._key(model)
        if found is not None and found not in self.keys:
            self.keys.insert(0, found)
            self.added = True

    def save(self) -> None:
        if not self.added or self.path is None:
            return
        write_cache(self.path, json.dumps(self.keys[:self.KEPT]))

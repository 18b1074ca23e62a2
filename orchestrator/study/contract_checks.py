"""The component contract (dape_core/contract.py) over a study's resolved trials, before anything launches.

- `model.leak` on components none of which declares the `leak` setting: refused for every trial, on every
  loading of the study (no torch needed).
- The contract's checks (causality with random parameters, block paths, parameter count, cost, determinism):
  on every loading, for the trials that use a plugin's component (so `run`, `plan`, ... refuse a broken plugin
  too); at `orchestrator validate`, for every trial's components, built-in ones included (`everything`).

Each distinct set of components and settings is checked once (`dape_core.contract.key`), at most
MAX_CHECKED per study (each a fraction of a second). A problem names the trial, the component with its owner
(a plugin's module, or built-in), the check, and what failed; docs/extending.md says what each one means.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dape_core.contract import key, leak_refusal

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
    if models:
        from dape_core.contract import refusals  # torch: only where a model is built

        problems += [f"{where}: {refusal}. {SEE}" for where, model in models for refusal in refusals(model)]
    return problems

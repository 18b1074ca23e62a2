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

from dape_core.contract import key, leak_refusal

MAX_CHECKED = 32  # distinct component configs checked per study
SEE = 'See docs/extending.md, "The contract"'  # what each refusal means, and how to fix it


def _model(trial):
    """The model a trial trains: a CHE task's is shaped for the task (vocabulary, bidirectional encoder)."""
    config = trial.config
    return config.che.model_config(config.model) if config.che is not None else config.model


def _owners(model) -> set[str]:
    return {model.encoding.owner, model.processor_facts.owner, model.form_facts.owner}


def contract_problems(trials: list, plugins: list | tuple = (), everything: bool = False) -> list[str]:
    """The contract's refusals over `trials` (ResolvedTrial): the leak rule for all; the checks that build a
    model for those using a component of `plugins` (Plugin), or for all with `everything`."""
    modules = {plugin.module for plugin in plugins}
    problems: list[str] = []
    seen: set[str] = set()
    for trial in trials:
        model = _model(trial)
        leak = leak_refusal(model)
        if leak is not None:
            problems.append(f"{trial.where}: model.leak: {leak}")
            continue
        if not everything and not _owners(model) & modules:
            continue
        identity = key(model)
        if identity in seen or len(seen) >= MAX_CHECKED:
            continue
        seen.add(identity)
        from dape_core.contract import refusals  # torch: only where a model is built

        problems += [f"{trial.where}: {refusal}. {SEE}" for refusal in refusals(model)]
    return problems

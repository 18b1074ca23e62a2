"""Expand a validated study into trials: one per report row (cell) and seed, each with a stable identity
(study/identity.py). Rows that differ only in settings their trial ignores are one trial, trained once, whose
run each of those rows reads (`distinct`, `shared_rows`). Stores written before the identity left the unused
settings out tagged runs with the legacy identity; `StoredIdentities` finds those too, so finished work is
not retrained. With a sampling search (random, Optuna) the expanded trials are templates: Ray Tune fills in
the sampled `params`, and `materialize` turns what Tune hands a trial back into a concrete Trial, on the worker and
on the driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from dape_core import ExperimentConfig
from dape_core.plugins import load_shipped

from ..study.identity import legacy_identity, trial_identity
from ..study.model import Study
from ..study.overrides import resolve
from ..study.trial_checks import resolved_rows


@dataclass(frozen=True)
class Trial:
    label: str
    variant: str
    seed: int
    baseline: bool
    index: int  # row order in the report
    config: dict  # the fully resolved, validated ExperimentConfig as a plain dict
    swept: dict = field(default_factory=dict)  # dotted key -> value of the axes/zip/search point of this row
    overrides: dict = field(default_factory=dict)  # everything this row sets on top of base (variant + point)
    template_id: str = ""  # a sampled trial: the identity of the row it was sampled from (its template)
    plugins: tuple = ()  # the study's plugins, as they travel (dape_core.plugins.Plugin.payload)

    @cached_property  # hashing validates the config: once per trial
    def trial_id(self) -> str:
        return trial_identity(self.config)

    @cached_property
    def legacy_id(self) -> str:
        """The identity older stores tagged this row's run with (unused settings included)."""
        return legacy_identity(self.config)

    @property
    def workers(self) -> int:
        return self.config["distributed"]["workers"]

    @property
    def run_name(self) -> str:
        return f"{self.label} · s{self.seed}"

    def payload(self) -> dict:
        """What travels to the Ray Tune trial: plain, picklable data."""
        return {"label": self.label, "variant": self.variant, "seed": self.seed, "baseline": self.baseline,
                "index": self.index, "config": self.config, "swept": self.swept,
                "overrides": self.overrides, "template_id": self.template_id, "plugins": list(self.plugins)}


def distinct(trials: list[Trial]) -> list[Trial]:
    """One trial per identity, the first row of each (what runs: a shared trial trains once)."""
    seen: dict[str, Trial] = {}
    for trial in trials:
        seen.setdefault(trial.trial_id, trial)
    return list(seen.values())


def shared_rows(trials: list[Trial]) -> dict[int, int]:
    """{position in `trials`: position of the first row with the same identity} for the rows that read
    another row's run (positions 0-based, in `trials`' order)."""
    first: dict[str, int] = {}
    shared = {}
    for position, trial in enumerate(trials):
        earlier = first.setdefault(trial.trial_id, position)
        if earlier != position:
            shared[position] = earlier
    return shared


class StoredIdentities:
    """The tags a run of each trial may carry in a store: its identity, then (stores written before the
    identity left the unused settings out) the legacy identity of its own row, then those of the other rows
    that share it. A run found under any of them is the trial's run: a finished one is not trained again."""

    def __init__(self, trials: list[Trial]):
        self.tags: dict[str, list[str]] = {}
        for trial in trials:
            self.tags.setdefault(trial.trial_id, [trial.trial_id])
            if trial.legacy_id not in self.tags[trial.trial_id]:
                self.tags[trial.trial_id].append(trial.legacy_id)

    def candidates(self, trial: Trial) -> list[str]:
        others = [tag for tag in self.tags.get(trial.trial_id, []) if tag not in (trial.trial_id, trial.legacy_id)]
        return [trial.trial_id, trial.legacy_id, *others]

    def lookup(self, trial: Trial, by_tag: dict[str, Any]) -> Any:
        """The value `by_tag` holds for the first of the trial's tags it has, else None."""
        return next((by_tag[tag] for tag in self.candidates(trial) if tag in by_tag), None)

    def done(self, trial: Trial, finished: set[str]) -> bool:
        return any(tag in finished for tag in self.candidates(trial))


def expand(study: Study) -> list[Trial]:
    """One trial per row and seed, from the rows' configs as the study's validation resolved them (each row is
    resolved once per command: study/trial_checks.py's `resolved_rows`); a seed sets only `train.seed`."""
    trials, plugins = [], study.plugin_payloads()
    for index, row in enumerate(resolved_rows(study)):
        cell = row.cell
        assert cell is not None, "a study row has its cell (only a search value's config has none)"
        for seed in study.seeds:
            resolved = row.config.to_dict()  # a fresh plain dict per trial
            resolved["train"]["seed"] = seed
            trials.append(Trial(label=cell.label, variant=cell.variant, seed=seed, baseline=cell.baseline,
                                index=index, config=resolved, swept=cell.swept, overrides=dict(cell.overrides),
                                plugins=plugins))
    return trials


def materialize(tune_config: dict[str, Any]) -> Trial:
    """The concrete Trial behind a Tune trial config: its template plus any sampled `params`. The study's
    plugins are loaded first (in a worker's process, from what the driver sent): its config names them."""
    load_shipped(tune_config["trial"].get("plugins"))
    template = Trial(**{**tune_config["trial"], "plugins": tuple(tune_config["trial"].get("plugins") or ())})
    params = tune_config.get("params") or {}
    if not params:
        return template
    config = ExperimentConfig(**resolve(template.config, params)).to_dict()
    label = ", ".join(f"{key.split('.')[-1]}={_short(value)}" for key, value in sorted(params.items()))
    return replace(template, config=config, label=label, swept={**template.swept, **params},
                   overrides={**template.overrides, **params}, template_id=template.trial_id)


def _short(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def expand_stored(study: Study, stored: set[str]) -> list[Trial]:
    """The trials of a study as the store holds them: `expand(study)`, and for a study that adds seeds until its
    claims are decided (`decide:`) every row's first min_seeds seeds of `Decide.seed_order` plus each later seed
    of that order whose trial identity (or legacy identity) is in `stored` (the store's TRIAL_ID tags), so that
    the report, `status` and `evaluate` read the seeds the sequence added without listing the ones it never
    needed."""
    decide = study.decide
    if decide is None or study.search.sampled:
        return expand(study)
    order = decide.seed_order(study.seeds)
    first = set(order[:decide.min_seeds])
    every = expand(study.model_copy(update={"seeds": order}))
    identities = StoredIdentities(every)
    return [trial for trial in every
            if trial.seed in first or any(tag in stored for tag in identities.candidates(trial))]

"""Expand a validated study into trials: one per report row (cell) and seed, each with a stable identity.

The identity is a hash of the fully resolved trial config (less its trial size, `distributed`), so a trial
is recognised as already done no matter how the study file is reordered or relabelled; it tags the trial's
MLflow run and names its checkpoint folder. With a sampling
search (random, Optuna) the expanded trials are templates: Ray Tune fills in the sampled `params`, and
`materialize` turns what Tune hands a trial back into a concrete Trial, on the worker and on the driver.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any

from dape_core import ExperimentConfig

from ..study import Study, resolve


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

    @property
    def trial_id(self) -> str:
        return trial_identity(self.config)

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
                "overrides": self.overrides, "template_id": self.template_id}


def trial_identity(config: dict) -> str:
    """A hash of the resolved trial config without its `distributed` section: how many workers compute a
    trial does not change what it computes (the same global batch, data order and result), so a trial
    killed on 8 workers resumes its checkpoint on 4, and a finished trial is not rerun because its size
    changed. The size is still logged with the trial's params."""
    identity = {section: values for section, values in config.items() if section != "distributed"}
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def expand(study: Study) -> list[Trial]:
    trials = []
    for index, cell in enumerate(study.cells()):
        for seed in study.seeds:
            config = study.trial_config({**cell.overrides, "train.seed": seed})
            resolved = ExperimentConfig(**config).to_dict()
            trials.append(Trial(label=cell.label, variant=cell.variant, seed=seed, baseline=cell.baseline,
                                index=index, config=resolved, swept=cell.swept, overrides=dict(cell.overrides)))
    return trials


def materialize(tune_config: dict[str, Any]) -> Trial:
    """The concrete Trial behind a Tune trial config: its template plus any sampled `params`."""
    template = Trial(**tune_config["trial"])
    params = tune_config.get("params") or {}
    if not params:
        return template
    config = ExperimentConfig(**resolve(template.config, params)).to_dict()
    label = ", ".join(f"{key.split('.')[-1]}={_short(value)}" for key, value in sorted(params.items()))
    return replace(template, config=config, label=label, swept={**template.swept, **params},
                   overrides={**template.overrides, **params}, template_id=template.trial_id)


def _short(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)

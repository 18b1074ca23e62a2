"""Expand a validated study into trials: one per report row (cell) and seed, each with a stable identity.

The identity is a hash of the fully resolved trial config, so a trial is recognised as already done no
matter how the study file is reordered or relabelled; it tags the trial's MLflow run.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from dape_core import ExperimentConfig

from .study import Study, resolve


@dataclass(frozen=True)
class Trial:
    label: str
    variant: str
    seed: int
    baseline: bool
    index: int  # row order in the report
    config: dict  # the fully resolved, validated ExperimentConfig as a plain dict
    overrides: dict = field(default_factory=dict)  # what this row sets on top of base (variant + axis point)

    @property
    def trial_id(self) -> str:
        canonical = json.dumps(self.config, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    @property
    def run_name(self) -> str:
        return f"{self.label} · s{self.seed}"

    def payload(self) -> dict:
        """What travels to the Ray Tune trial: plain, picklable data."""
        return {"trial_id": self.trial_id, "label": self.label, "seed": self.seed, "config": self.config}


def expand(study: Study) -> list[Trial]:
    trials = []
    for index, cell in enumerate(study.cells()):
        for seed in study.seeds:
            config = resolve(study.base, {**cell.overrides, "train.seed": seed})
            resolved = ExperimentConfig(**config).to_dict()
            trials.append(Trial(label=cell.label, variant=cell.variant, seed=seed, baseline=cell.baseline,
                                index=index, config=resolved, overrides=dict(cell.overrides)))
    return trials

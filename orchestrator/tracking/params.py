"""A trial run's MLflow params: what the trial ran with, and nothing it did not.

- The values are the trial's effective config (`ExperimentConfig.to_dict()`: `model.train_length` is the
  training length, randomized RoPE's L_max the longest evaluation length, ...), flattened to dotted keys.
- Settings the trial does not read (dape_core/applicability.py: the kernel of a model without a processor,
  FIRE's L₀ for another encoding, a CHE trial's corpus) and settings without a value (None: no `che:`
  section, no `eval_every`) are not logged, so that MLflow's compare view is not crowded with them and a
  chart never shows the Kerple baseline as a kernel-3 run; the report reads a setting a run lacks as "n/a"
  (`effective_params` marks them so for a trial not run yet), and stores of runs that logged "n/a" read alike
  (readers compare params through `logged_form`).
- `train.device` and `train.precision` are logged when the trial reports the ones it resolved ("auto" is a
  request, not a device): with its final result (MLflow params cannot change once logged).
"""

from __future__ import annotations

from typing import Any

from dape_core import ExperimentConfig
from dape_core.applicability import unused_settings

NOT_APPLICABLE = "n/a"
RESOLVED_AT_RUN_TIME = ("train.device", "train.precision")  # logged from the trial's final result


def flatten(config: dict, prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def effective_params(config: dict) -> dict[str, Any]:
    """Every setting of a trial config, dotted, with those its run does not read marked NOT_APPLICABLE."""
    unused = unused_settings(ExperimentConfig(**config))
    return {key: NOT_APPLICABLE if key in unused else value for key, value in flatten(config).items()}


def logged_form(params: dict[str, Any]) -> dict[str, Any]:
    """Params as a run logs them: without the settings it does not read or that have no value (a run logged
    before they were left out has them as "n/a" or "None": the same run)."""
    return {key: value for key, value in params.items() if value is not None and str(value) not in ABSENT}


ABSENT = (NOT_APPLICABLE, "None")


def start_params(config: dict) -> dict[str, Any]:
    """The params logged when the trial's run is created: all but those resolved at run time, and those the
    trial does not read or that have no value."""
    return {key: value for key, value in logged_form(effective_params(config)).items()
            if key not in RESOLVED_AT_RUN_TIME}


def resolved_params(result: dict) -> dict[str, str]:
    """The device and precision a trial reports it ran on (its final result's `device` and `precision`)."""
    return {f"train.{key}": str(result[key]) for key in ("device", "precision") if result.get(key)}

"""The metrics a trial logs, known from its config before it runs, so that a searcher, ASHA or the report can
be checked against them at validation instead of waiting on a metric that never arrives.

The names are dape_core's (`dape_core.metric_names`: those of `ExperimentResult.metrics()` for a result shaped
like the trial's: its evaluation lengths, CHE test lengths, timing), plus what the trial reports while it trains
(trainable.py: `train_loss` every `train.log_every` steps, `val_loss` every `train.eval_every` steps).
"""

from __future__ import annotations

import re

import dape_core.metric_names as names
from dape_core.experiment_config import ExperimentConfig


def periodic_metrics(cfg: ExperimentConfig) -> set[str]:
    """Reported while the trial trains: what ASHA can compare trials on at its rungs."""
    return {names.TRAIN_LOSS} | ({names.VAL_LOSS} if cfg.train.eval_every else set())


def result_shape(cfg: ExperimentConfig) -> dict:
    """The shape of the trial's final result, as `dape_core.metric_names.result_names` takes it."""
    if cfg.che is not None:
        return {"che_test_lengths": cfg.che.test_lengths}
    return {"lengths": cfg.eval.lengths, "timed": cfg.eval.timing}


def logged_metrics(cfg: ExperimentConfig) -> set[str]:
    """Every metric the trial logs: periodic ones, and those of its final result."""
    return names.result_names(**result_shape(cfg)) | periodic_metrics(cfg)


def listing(names: set[str]) -> str:
    """Names in reading order: ppl_64 before ppl_128."""
    return ", ".join(sorted(names, key=lambda name: [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]))

"""The metrics a trial logs, known from its config before it runs, so that a searcher, ASHA or the report can
be checked against them at validation instead of waiting on a metric that never arrives.

The names come from dape_core's own `ExperimentResult.metrics()` (a result shaped like the trial's: its
evaluation lengths, CHE test lengths, timing), plus what the trial reports while it trains (trainable.py:
`train_loss` every `train.log_every` steps, `val_loss` every `train.eval_every` steps).
"""

from __future__ import annotations

import re

from dape_core import ExperimentConfig
from dape_core.experiment import ExperimentResult

# The report's metric families (ReportSpec.metric), by the columns that make their table.
FAMILY_COLUMNS = {"ppl": re.compile(r"^ppl_\d+$"), "delta_p": re.compile(r"^delta_p_\d+$"),
                  "accuracy": re.compile(r"^(che_acc_|acc_)"), "time": re.compile(r"^(ms_|train_seconds$)")}


def periodic_metrics(cfg: ExperimentConfig) -> set[str]:
    """Reported while the trial trains: what ASHA can compare trials on at its rungs."""
    return {"train_loss"} | ({"val_loss"} if cfg.train.eval_every else set())


def logged_metrics(cfg: ExperimentConfig) -> set[str]:
    """Every metric the trial logs: periodic ones, and those of its final result."""
    zero = 0.0
    if cfg.che is None:
        lengths = dict.fromkeys(cfg.eval.lengths, zero)
        result = ExperimentResult(perplexity=lengths, delta_p=lengths, ms_forward=lengths if cfg.eval.timing else {},
                                  **_common(zero))
    else:
        result = ExperimentResult(perplexity={}, che_acc_train=zero, che_acc_test=zero,
                                  che_accuracy=dict.fromkeys(cfg.che.test_lengths, zero), **_common(zero))
    return set(result.metrics()) | periodic_metrics(cfg)


def _common(zero: float) -> dict:
    return dict(final_train_loss=zero, train_seconds=zero, eval_seconds=zero, tokens_seen=0, num_parameters=0,
                data_hash="", ms_per_step=zero)


def listing(names: set[str]) -> str:
    """Names in reading order: ppl_64 before ppl_128."""
    return ", ".join(sorted(names, key=lambda name: [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]))

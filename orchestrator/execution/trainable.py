"""The function each trial runs (under Ray Tune, or in-process with --local): materialize the trial's
config, run the dape_core experiment, and report progress and results. It never writes to MLflow: the
driver is the only writer."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

from dape_core import ExperimentConfig, NonFiniteLossError, run_experiment
from dape_core.data import anchored
from dape_core.train import CheckpointStore, TrainerCallback

from ..planning.trials import materialize
from .protocol import CHECKPOINT_SET_ASIDE_KEY, FINAL_FLAG

Report = Callable[[dict], None]


class ReportingSink(TrainerCallback):
    """dape_core's trainer callback, forwarding training progress to a report function. With `all_ranks`
    (a multi-worker trial, whose report is collective) every rank calls it, with the same values."""

    def __init__(self, report: Report, total_steps: int, all_ranks: bool = False):
        self.report, self.total_steps, self.all_ranks = report, total_steps, all_ranks
        self.last_val_loss: float | None = None

    def on_step(self, step: int, loss: float, lr: float) -> None:
        self.report({"step": step, "total_steps": self.total_steps, "train_loss": loss, "lr": lr})

    def on_checkpoint_set_aside(self, note: str) -> None:
        # Becomes a tag of the trial's run and a console line (the driver's recorder and progress).
        self.report({"step": 0, "total_steps": self.total_steps, CHECKPOINT_SET_ASIDE_KEY: note})

    def on_validation(self, step: int, val_loss: float) -> None:
        # ASHA and Optuna's pruning read this periodic validation loss.
        self.last_val_loss = val_loss
        self.report({"step": step, "total_steps": self.total_steps, "val_loss": val_loss})


def checkpoint_every(steps: int) -> int:
    """Ten checkpoints per trial: a crashed or interrupted trial loses at most a tenth of its training."""
    return max(1, steps // 10)


def execute(tune_config: dict, report: Report, threads: int, all_ranks: bool = False) -> None:
    """Run one trial and report its final result (or the reason it could not finish) through `report`.

    A trial with a checkpoint folder (`tune_config["checkpoint_root"]`, one sub-folder per trial identity)
    resumes from its last checkpoint: after a crash retried by Ray Tune, or after the whole orchestrator
    was killed and run again.

    all_ranks: this is one worker of a multi-worker trial (`ray_train.py`), and `report` must be called the
    same number of times on every rank: progress is reported by every rank, and the final result too (an
    empty one where the rank is not 0, since rank 0 alone evaluates).
    """
    trial = materialize(tune_config)
    experiment = ExperimentConfig(**trial.config)
    if tune_config.get("launch_dir") and experiment.che is None:
        # Relative data paths name files under the folder the study was launched from, not the trial's own.
        experiment = dataclasses.replace(experiment, data=anchored(experiment.data, tune_config["launch_dir"]))
    steps = experiment.train.steps
    root = tune_config.get("checkpoint_root")
    folder = Path(root) / trial.trial_id if root else None
    sink = ReportingSink(report, steps, all_ranks)
    try:
        result = run_experiment(experiment, sink, threads=threads, checkpoint_dir=folder,
                                checkpoint_every=checkpoint_every(steps) if folder else None,
                                artifacts_dir=folder / "artifacts" if folder else None)
    except NonFiniteLossError as error:
        # Deterministic: retrying would diverge again. End the trial with its reason instead.
        report({FINAL_FLAG: 1, "step": steps, "total_steps": steps, "error": f"NonFiniteLossError: {error}"})
        return
    if result is None:  # a rank other than 0 of a multi-worker trial: rank 0 reports the result
        report({})
        return
    if folder is not None:  # finished: the identity now skips this trial, its weights need not stay on disk
        CheckpointStore(folder, experiment.fingerprint()).remove()
    final = {FINAL_FLAG: 1, "step": steps, "total_steps": steps, "data_hash": result.data_hash,
             "device": result.device, "artifacts": [str(path) for path in result.artifacts]}
    if result.resumed_from is not None:
        final["resumed_from_step"] = result.resumed_from
    if sink.last_val_loss is not None:
        final["val_loss"] = sink.last_val_loss  # searchers read the metric from the final result
    # train_loss, ppl_<L>, delta_p_<L>, ms_per_step, ms_forward_<L>, flops_per_token, peak_memory_mb, ...
    final.update(result.metrics())
    report(final)


def run_trial(config: dict) -> None:
    """The Ray Tune function trainable. A multi-worker trial runs as a Ray Train run (`ray_train.py`)."""
    import ray
    from ray import tune

    if materialize(config).workers > 1:
        from .ray_train import run_multi_worker_trial

        run_multi_worker_trial(config)
        return
    threads = max(1, int(tune.get_context().get_trial_resources().required_resources.get("CPU", 1)))

    def report(metrics: dict) -> None:
        tune.report({**metrics, "ray_node_id": ray.get_runtime_context().get_node_id()} if metrics.get(FINAL_FLAG) else metrics)

    execute(config, report, threads)

"""The function each Ray Tune trial runs: validate the trial's config, run the dape_core experiment, and
report progress and results to Tune (never to MLflow directly: the driver is the only MLflow writer)."""

from __future__ import annotations

from pathlib import Path

from ray import tune

from dape_core import ExperimentConfig, run_experiment
from dape_core.train import TrainerCallback

FINAL_FLAG = "final"


class TuneSink(TrainerCallback):
    """dape_core's trainer callback, forwarding training progress to Ray Tune."""

    def __init__(self, total_steps: int):
        self.total_steps = total_steps

    def on_step(self, step: int, loss: float, lr: float) -> None:
        tune.report({"step": step, "total_steps": self.total_steps, "train_loss": loss, "lr": lr})

    def on_validation(self, step: int, val_loss: float) -> None:
        tune.report({"step": step, "total_steps": self.total_steps, "val_loss": val_loss})


def run_trial(config: dict) -> None:
    payload = config["trial"]
    experiment = ExperimentConfig(**payload["config"])
    threads = max(1, int(tune.get_context().get_trial_resources().required_resources.get("CPU", 1)))
    artifacts_dir = Path(tune.get_context().get_trial_dir()) / "attention"
    result = run_experiment(experiment, TuneSink(experiment.train.steps), threads=threads, artifacts_dir=artifacts_dir)
    final = {FINAL_FLAG: 1, "step": experiment.train.steps, "total_steps": experiment.train.steps,
             "data_hash": result.data_hash, "device": result.device, "artifacts": result.artifacts}
    # train_loss, ppl_<L>, delta_p_<L>, ms_per_step, ms_forward_<L>, flops_per_token, peak_memory_mb, ...
    final.update(result.metrics())
    tune.report(final)

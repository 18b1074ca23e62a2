"""The function each trial runs (under Ray Tune, or in-process with --local): materialize the trial's
config, run the dape_core experiment, and report progress and results. It never writes to MLflow: the
driver is the only writer."""

from __future__ import annotations

from typing import Callable

from dape_core import ExperimentConfig, NonFiniteLossError, run_experiment

from .recorder import FINAL_FLAG
from .trials import materialize

Report = Callable[[dict], None]


class ReportingSink:
    """dape_core's trainer callback, forwarding training progress to a report function."""

    def __init__(self, report: Report, total_steps: int):
        self.report, self.total_steps = report, total_steps

    def on_step(self, step: int, loss: float, lr: float) -> None:
        self.report({"step": step, "total_steps": self.total_steps, "train_loss": loss, "lr": lr})


def execute(tune_config: dict, report: Report, threads: int) -> None:
    """Run one trial and report its final result (or the reason it could not finish) through `report`."""
    trial = materialize(tune_config)
    experiment = ExperimentConfig(**trial.config)
    steps = experiment.train.steps
    try:
        result = run_experiment(experiment, ReportingSink(report, steps), threads=threads)
    except NonFiniteLossError as error:
        # Deterministic: retrying would diverge again. End the trial with its reason instead.
        report({FINAL_FLAG: 1, "step": steps, "total_steps": steps, "error": f"NonFiniteLossError: {error}"})
        return
    final = {
        FINAL_FLAG: 1,
        "step": steps,
        "total_steps": steps,
        "train_loss": result.final_train_loss,
        "train_seconds": result.train_seconds,
        "eval_seconds": result.eval_seconds,
        "tokens_seen": result.tokens_seen,
        "num_parameters": result.num_parameters,
        "data_hash": result.data_hash,
        # dape_core trains on the CPU unless it reports another device.
        "device": str(result.extra.get("device", "cpu")),
    }
    final.update({f"ppl_{length}": value for length, value in result.perplexity.items()})
    report(final)


def run_trial(config: dict) -> None:
    """The Ray Tune function trainable."""
    import ray
    from ray import tune

    threads = max(1, int(tune.get_context().get_trial_resources().required_resources.get("CPU", 1)))

    def report(metrics: dict) -> None:
        tune.report({**metrics, "ray_node_id": ray.get_runtime_context().get_node_id()} if metrics.get(FINAL_FLAG) else metrics)

    execute(config, report, threads)

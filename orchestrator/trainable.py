"""The function each Ray Tune trial runs: validate the trial's config, run the dape_core experiment, and
report progress and results to Tune (never to MLflow directly: the driver is the only MLflow writer)."""

from __future__ import annotations

from ray import tune

from dape_core import ExperimentConfig, run_experiment

FINAL_FLAG = "final"


class TuneSink:
    """dape_core's trainer callback, forwarding training progress to Ray Tune."""

    def __init__(self, total_steps: int):
        self.total_steps = total_steps

    def on_step(self, step: int, loss: float, lr: float) -> None:
        tune.report({"step": step, "total_steps": self.total_steps, "train_loss": loss, "lr": lr})


def run_trial(config: dict) -> None:
    payload = config["trial"]
    experiment = ExperimentConfig(**payload["config"])
    threads = max(1, int(tune.get_context().get_trial_resources().required_resources.get("CPU", 1)))
    result = run_experiment(experiment, TuneSink(experiment.train.steps), threads=threads)
    final = {
        FINAL_FLAG: 1,
        "step": experiment.train.steps,
        "total_steps": experiment.train.steps,
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
    tune.report(final)

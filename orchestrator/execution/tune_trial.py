"""Ray Tune's function trainable: the entry of every Tune trial, on its worker. A one-worker trial runs
`execute` (trainable.py) in the Tune trial's process; a multi-worker trial runs a Ray Train run
(ray_train.py), whose workers run `execute` each. Imported by the Tuner's driver (ray_tune.py) for the
function and by each trial's process to run it: no MLflow, no driver side."""

from __future__ import annotations

import gc

from ..trial.protocol import FINAL_FLAG
from ..trial.trials import materialize
from .trainable import execute


def run_trial(config: dict) -> None:
    """The Ray Tune function trainable. A multi-worker trial runs as a Ray Train run (`ray_train.py`)."""
    import ray
    from ray import tune

    if materialize(config).workers > 1:
        from .ray_train import run_multi_worker_trial  # Ray Train: imported by the trials that need it

        run_multi_worker_trial(config)
        return
    threads = max(1, int(tune.get_context().get_trial_resources().required_resources.get("CPU", 1)))

    def report(metrics: dict) -> None:
        tune.report({**metrics, "ray_node_id": ray.get_runtime_context().get_node_id()}
                    if metrics.get(FINAL_FLAG) else metrics)

    try:
        execute(config, report, threads)
    finally:
        _release_gpu_memory()


def _release_gpu_memory() -> None:
    """The process may run the study's next trial (Tune reuses it): hand this trial's cached GPU blocks back, so
    that a larger model next finds the memory a fresh process would."""
    import torch  # loaded already: the trial trained in this process

    if torch.cuda.is_initialized():
        gc.collect()
        torch.cuda.empty_cache()

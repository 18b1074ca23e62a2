"""A multi-worker trial: its Ray Tune trial runs a Ray Train `TorchTrainer` whose workers train the trial
together (DDP or FSDP, in dape_core), so that one sweep holds trials of 1, 2 or 8 workers side by side.

The Tune trial is the driver of the Train run (Ray Train's own pattern for tuning distributed runs): it
reserves a little memory and no CPU or GPU, since Ray Train reserves the workers' own (`resources.cpus`
and `resources.gpus` each, in one placement group) when it starts them; a CPU for the driver could leave
a 2-worker trial on a 2-CPU machine waiting forever. Rank 0's reports reach Tune through Ray's
`TuneReportCallback`, so the study's driver sees the same results, in the same form, as from a one-worker
trial, and writes one MLflow run per trial. Ray Train's `report` is a barrier: every rank calls it the same
number of times (dape_core calls a callback with `all_ranks` on every rank), and ranks other than 0 send
empty results.
"""

from __future__ import annotations

from pathlib import Path

from ..trial.protocol import FINAL_FLAG
from ..trial.trials import materialize
from .trainable import execute

# What the Tune trial of a multi-worker trial reserves for itself: the Train run's driver is a light process.
DRIVER_MEMORY_BYTES = 256 * 2**20
# The process group's timeout. Ranks other than 0 wait at a barrier while rank 0 evaluates, which at paper
# scale (five lengths up to 8192 tokens) may take a while; a dead worker is detected by Ray, not by this.
PROCESS_GROUP_TIMEOUT_S = 4 * 3600


def tune_trial_bundles(workers: int, cpus: float, gpus: float) -> list[dict]:
    """The placement-group bundles Ray Tune reserves for a trial of `workers` workers."""
    if workers == 1:
        return [{"CPU": cpus, "GPU": gpus}]
    return [{"memory": DRIVER_MEMORY_BYTES}]


def run_multi_worker_trial(config: dict) -> None:
    """The Tune function trainable of a multi-worker trial: start its Train run and wait for it. A worker
    that fails fails the run (`max_failures=0`), and Ray Tune retries the trial as it retries a one-worker
    trial (`resources.max_retries`); the retry resumes from the trial's sharded checkpoint."""
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    trial = materialize(config)
    size = trial.config["distributed"]
    per_worker = {name: amount for name, amount in config["worker_resources"].items() if amount}
    gpus = per_worker.get("GPU", 0)
    trainer = TorchTrainer(
        train_worker,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=size["workers"], use_gpu=gpus > 0, resources_per_worker=per_worker),
        torch_config=TorchConfig(backend="nccl" if gpus else "gloo", timeout_s=PROCESS_GROUP_TIMEOUT_S),
        run_config=RunConfig(name=f"trial_{trial.trial_id}", storage_path=str(Path(config["train_storage"])),
                             # ray.train.RunConfig is typed as Train v1's (Tune callbacks); Train v2's takes
                             # UserCallbacks such as this one
                             callbacks=[TuneReportCallback()],  # type: ignore[list-item]
                             failure_config=FailureConfig(max_failures=0)),
    )
    trainer.fit()


def train_worker(config: dict) -> None:
    """What every worker runs: the trial's dape_core experiment, in the process group Ray Train set up."""
    import ray
    import ray.train
    import torch.distributed as dist

    rank = ray.train.get_context().get_world_rank()
    # Where each rank runs, for the trial's run in MLflow (and the cluster test): one node id per rank.
    node_ids: list = [None] * dist.get_world_size()
    dist.all_gather_object(node_ids, ray.get_runtime_context().get_node_id())

    def report(metrics: dict) -> None:
        if rank != 0:
            metrics = {}
        elif metrics.get(FINAL_FLAG):
            metrics = {**metrics, "ray_node_id": node_ids[0], "worker_node_ids": ",".join(node_ids)}
        ray.train.report(metrics)

    threads = max(1, int(config["worker_resources"].get("CPU", 1)))
    execute(config, report, threads, all_ranks=True)

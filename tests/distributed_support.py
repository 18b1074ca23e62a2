"""Run dape_core experiments on several CPU processes (gloo) for the tests and the benchmark.

The processes are started once with torch.multiprocessing (spawn), meet through a file store, and run a list
of jobs one after the other in the same process group (starting Python and importing torch dominates a small
run's cost on a busy machine). After each job every rank writes what it saw (the loss curve its callback got
and, on rank 0, the result) to a JSON file. A job may end the processes on purpose right after a checkpoint,
as a crash would (`die_after_checkpoint`); it must be the last of its list.

Nothing here knows Ray: this is how any launcher (torchrun, Ray Train) hands dape_core a process group.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from dape_core import ExperimentConfig, run_experiment
from dape_core.train import TrainerCallback

KILLED = 17  # exit code of the ranks ended on purpose (a simulated crash right after a checkpoint)


class Interrupted(Exception):
    """Raised by the callback to stop a run in this process right after a checkpoint."""


class CurveRecorder(TrainerCallback):
    """The per-step loss, validation losses and checkpoint steps; optionally dies (the process exits) or is
    interrupted (an exception) right after one checkpoint."""

    def __init__(self, die_after_checkpoint: int | None = None, interrupt_after_checkpoint: int | None = None):
        self.losses: dict[int, float] = {}
        self.validations: list[tuple[int, float]] = []
        self.checkpoints: list[int] = []
        self.die_after_checkpoint = die_after_checkpoint
        self.interrupt_after_checkpoint = interrupt_after_checkpoint

    def on_step(self, step, loss, lr):
        self.losses[step] = loss

    def on_validation(self, step, val_loss):
        self.validations.append((step, val_loss))

    def on_checkpoint(self, step, path):
        self.checkpoints.append(step)
        if step == self.die_after_checkpoint:
            os._exit(KILLED)  # no cleanup, no exception handling: as if the process were killed
        if step == self.interrupt_after_checkpoint:
            raise Interrupted(step)


def run_job(config: dict, checkpoint_dir: str | None = None, checkpoint_every: int | None = None,
            die_after_checkpoint: int | None = None, interrupt_after_checkpoint: int | None = None) -> dict | None:
    """One experiment in this process (inside a process group if one is initialized): what it reported, or
    None when it was interrupted on purpose."""
    recorder = CurveRecorder(die_after_checkpoint, interrupt_after_checkpoint)
    try:
        result = run_experiment(ExperimentConfig(**config), recorder, checkpoint_dir=checkpoint_dir,
                                checkpoint_every=checkpoint_every)
    except Interrupted:
        return None
    out = {"losses": {str(k): v for k, v in recorder.losses.items()}, "validations": recorder.validations,
           "checkpoints": recorder.checkpoints, "result": None}
    if result is not None:
        out["result"] = {"perplexity": {str(k): v for k, v in result.perplexity.items()},
                         "final_train_loss": result.final_train_loss, "tokens_seen": result.tokens_seen,
                         "resumed_from": result.resumed_from, "ms_per_step": result.ms_per_step,
                         "peak_memory_bytes": result.peak_memory_bytes, "num_parameters": result.num_parameters}
    return out


def _rank_main(rank: int, world_size: int, folder: str, jobs: list[dict]) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{folder}/store", rank=rank, world_size=world_size)
    try:
        for index, job in enumerate(jobs):
            summary = run_job(**job)
            Path(folder, f"job{index}_rank{rank}.json").write_text(json.dumps(summary))
    finally:
        dist.destroy_process_group()


def run_on_workers(world_size: int, jobs: list[dict]) -> list[list[dict] | None]:
    """Run `jobs` (keyword arguments of `run_job`; each config's `distributed.workers` = world_size) on
    `world_size` spawned CPU processes. Returns, per job, every rank's summary, or None for a job that
    ended the processes on purpose."""
    with tempfile.TemporaryDirectory(prefix="dape-ranks-") as folder:
        try:
            mp.start_processes(_rank_main, args=(world_size, folder, jobs), nprocs=world_size, join=True,
                               start_method="spawn")
        except mp.ProcessExitedException as error:
            if error.exit_code != KILLED:
                raise
        out = []
        for index in range(len(jobs)):
            files = [Path(folder, f"job{index}_rank{rank}.json") for rank in range(world_size)]
            out.append([json.loads(f.read_text()) for f in files] if all(f.is_file() for f in files) else None)
        return out


def with_workers(config: dict, workers: int, parallelism: str = "ddp") -> dict:
    return {**config, "distributed": {"workers": workers, "parallelism": parallelism}}


def max_abs_difference(a: dict[str, float], b: dict[str, float]) -> float:
    assert a.keys() == b.keys(), (sorted(a), sorted(b))
    return max(abs(a[key] - b[key]) for key in a)

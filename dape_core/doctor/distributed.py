"""With two or more GPUs: a DDP and an FSDP run of a few training steps on two of them (NCCL) against the same
steps on one device, the same global batch and data order (dape_core.train.distributed's contract). They differ
only by the order of float32 sums across ranks, so their loss curves must agree to TOLERANCE. A tiny
DAPE1x3-Kerple model in float32, so that a mismatch is the distribution's, not bfloat16 rounding (on a GPU its
attention runs on the fused kernels, self-check included). The same code runs on CPU processes over gloo for
the tests (tests/test_doctor.py); the doctor runs it only on GPUs.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

import dape_core.metric_names as metric_names

from . import FAIL, PASS, SKIP, Outcome

if TYPE_CHECKING:
    from dape_core.train.distributed_config import Parallelism

STEPS = 3
TOLERANCE = 1e-4  # nats, on a loss of about 5.5 (tests/test_distributed.py measures ~5e-7 on CPU)
MODEL: dict[str, Any] = {"preset": "tiny", "pos_encoding": "kerple", "processor": "dapev2", "kernel_size": 3,
                         "d_dape": 8, "train_length": 64}
PARALLELISMS: tuple[Parallelism, ...] = ("ddp", "fsdp")
TRAIN: dict[str, Any] = {"steps": STEPS, "batch_size": 8, "seq_len": 64, "log_every": 1, "precision": "fp32",
                         "lr": 1e-3}


def run() -> list[Outcome]:
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count < 2:
        found = f"{count} GPU" if count == 1 else "no GPU"
        return [Outcome(SKIP, "DDP and FSDP steps = one device's", f"needs 2 or more GPUs, this machine has {found}")]
    return compare([torch.device("cuda", 0), torch.device("cuda", 1)], "nccl")


def compare(devices: list[torch.device], backend: str) -> list[Outcome]:
    """One device's loss curve (devices[0], in this process), then DDP's and FSDP's over `devices` (one spawned
    process per device, `backend`, both runs in the same processes), each against it."""
    one = curve(devices[0])
    names = {p: f"{p.upper()} on {len(devices)} x {devices[0].type} = one device ({STEPS} steps)" for p in PARALLELISMS}
    try:
        runs = on_workers(devices, backend)
    except Exception as error:  # noqa: BLE001 - a failed run is this check's failure
        return [Outcome(FAIL, name, f"{type(error).__name__}: {error}"[:300]) for name in names.values()]
    outcomes = []
    for parallelism, name in names.items():
        theirs = runs[parallelism]
        difference = max(abs(one["losses"][step] - theirs["losses"][step]) for step in one["losses"])
        detail = (f"max |Δ loss| {difference:.2g} nats (tolerance {TOLERANCE:g}), final loss "
                  f"{theirs['losses'][str(STEPS)]:.4f}; ms/step {theirs[metric_names.MS_PER_STEP]:.1f} vs one "
                  f"device's {one[metric_names.MS_PER_STEP]:.1f}")
        outcomes.append(Outcome(PASS if difference <= TOLERANCE else FAIL, name, detail))
    return outcomes


def curve(device: torch.device, parallelism: Parallelism = "ddp") -> dict:
    """This process's rank's losses per step ({"1": loss, ...}) and ms per step, in the process group if one is
    initialized (every rank reads its rows of each global batch), else on one device."""
    from dape_core.config import ModelConfig
    from dape_core.data import DataConfig, TrainStream, load_corpus
    from dape_core.model import build_model
    from dape_core.train import TrainConfig, World, resolve_precision, train
    from dape_core.train.distributed import DistributedConfig, parallelize

    world = World.current()
    cfg = TrainConfig(**TRAIN, device=str(device))
    precision = resolve_precision(cfg.precision, device)
    torch.manual_seed(0)
    model = parallelize(build_model(ModelConfig(**MODEL)).to(device),
                        DistributedConfig(workers=world.size, parallelism=parallelism), world, precision)
    regions = load_corpus(DataConfig(max_files=20)).stream_regions()
    stream = TrainStream(regions, cfg.seq_len, seed=0, rank=world.rank, world_size=world.size)
    losses: dict[str, float] = {}

    class Recorder:
        def on_step(self, step, loss, lr):
            losses[str(step)] = loss

    result = train(model, stream, cfg, Recorder(), precision=precision, world=world)
    return {"losses": losses, metric_names.MS_PER_STEP: result.ms_per_step or 0.0}


def on_workers(devices: list[torch.device], backend: str) -> dict[str, dict]:
    """Rank 0's `curve` of a DDP and an FSDP run, one after the other on one spawned process per device."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="dape-doctor-") as folder:
        mp.start_processes(_rank, args=(folder, [str(d) for d in devices], backend), nprocs=len(devices), join=True,
                           start_method="spawn")
        return {p: json.loads(Path(folder, f"{p}.json").read_text()) for p in PARALLELISMS}


def _rank(rank: int, folder: str, devices: list[str], backend: str) -> None:
    import torch.distributed as dist

    device = torch.device(devices[rank])
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)
    dist.init_process_group(backend, init_method=f"file://{folder}/store", rank=rank, world_size=len(devices))
    try:
        for parallelism in PARALLELISMS:
            summary = curve(device, parallelism)
            if rank == 0:
                Path(folder, f"{parallelism}.json").write_text(json.dumps(summary))
    finally:
        dist.destroy_process_group()

"""Training one model on several processes with `torch.distributed`: data-parallel (DDP) or fully sharded
(FSDP2, `torch.distributed.fsdp.fully_shard`). It knows nothing of who started the processes (torchrun, Ray
Train, a test's `torch.multiprocessing`): it reads the default process group.

The contract that makes a run on N workers the same run as on one:
- each step's global batch is `train.batch_size` sequences, the same windows whatever N is; rank r reads only
  its own rows of it (`TrainStream(rank=..., world_size=...)`), batch_size / N of them, split into
  `train.grad_accum` micro-batches as on one worker;
- every rank starts from the same seed, so the model's initial weights and the torch RNG (randomized RoPE's
  positions) are the same on every rank;
- gradients are averaged over the ranks (DDP's all-reduce, FSDP's reduce-scatter), once per step;
- the loss a step reports is the mean over ranks, so every rank sees the same value.

What differs is only the order of floating-point sums (a gradient is averaged across ranks instead of
within one batch), which is why the tests compare loss curves with a tolerance, not bit for bit.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import torch
import torch.distributed as dist
from torch import nn

from .distributed_config import DistributedConfig, Parallelism  # noqa: F401 (their home before the split)

if TYPE_CHECKING:
    from torch.distributed.fsdp import FSDPModule


@dataclass(frozen=True)
class World:
    """This process's place among the trial's processes: rank 0 of 1 without a process group."""

    rank: int = 0
    size: int = 1

    @classmethod
    def current(cls) -> "World":
        if dist.is_available() and dist.is_initialized():
            return cls(dist.get_rank(), dist.get_world_size())
        return cls()

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """In place, over every rank (a no-op on one)."""
        if self.distributed:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def max(self, value: float, device: torch.device) -> float:
        if not self.distributed:
            return value
        tensor = torch.tensor([float(value)], dtype=torch.float64, device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return float(tensor.item())


def check_world(cfg: DistributedConfig, world: World) -> None:
    """The config says how many workers train the trial; the process group must agree, so that what is
    logged (`distributed.workers`) is what ran."""
    if cfg.workers != world.size:
        started = (f"this process is rank {world.rank} of a process group of {world.size}" if world.distributed
                   else "no torch.distributed process group of that size is initialized in this process")
        raise RuntimeError(f"distributed.workers is {cfg.workers} but {started}: start {cfg.workers} processes "
                           "(torchrun --nproc-per-node, or the orchestrator with resources.workers) or set "
                           f"distributed.workers to {world.size}")


def local_device(device: torch.device, world: World) -> torch.device:
    """A rank's own GPU: under a process group, `cuda` without an index is the current CUDA device, which
    the launcher selects for each rank (Ray Train does; a torchrun script calls
    `torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))` first). A given index and the CPU are kept."""
    if device.type != "cuda" or device.index is not None or not world.distributed:
        return device
    return torch.device("cuda", torch.cuda.current_device())


def parallelize(model: nn.Module, cfg: DistributedConfig, world: World, precision) -> nn.Module:
    """Wrap a model already on its device for `world` (returned unchanged on one worker).

    FSDP shards every block on its own (its parameters are gathered just before it runs and freed after),
    then the rest of the model at the root. A model whose blocks share parameters (T5's one bias table for
    all layers) is sharded at the root only: a parameter may belong to one FSDP group. With bf16 precision
    FSDP holds the parameters in fp32 shards, computes with bf16 copies and reduces gradients in fp32."""
    if not world.distributed:
        return model
    if cfg.parallelism == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        device = next(model.parameters()).device
        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    return shard_model(model, world, precision)


def shard_model(model: nn.Module, world: World, precision) -> nn.Module:
    """FSDP2 over every rank of `world` (also a world of one, which benchmarks FSDP's own cost)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if precision.name == "fp16":
        raise RuntimeError("train.precision fp16 with distributed.parallelism fsdp is not supported (fp16 needs a "
                           "loss scaler over sharded gradients): use bf16 on a GPU that has it, fp32, or ddp")
    device = next(model.parameters()).device
    mesh = init_device_mesh(device.type, (world.size,))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if precision.name == "bf16" \
        else MixedPrecisionPolicy()
    blocks = list(getattr(model, "blocks", []))
    if blocks and not _shares_parameters(blocks):
        for block in blocks:
            fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def _shares_parameters(modules: list[nn.Module]) -> bool:
    seen: set[int] = set()
    for module in modules:
        ids = {id(p) for p in module.parameters()}
        if ids & seen:
            return True
        seen |= ids
    return False


def unwrap(model: nn.Module) -> nn.Module:
    """The model under a DDP wrapper (FSDP2 shards the model in place: it is its own module)."""
    return getattr(model, "module", model)


def is_sharded(model: nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


@contextmanager
def gradient_sync(model: nn.Module, enabled: bool):
    """Accumulate gradients locally on every micro-batch but a step's last: one all-reduce (DDP) or
    reduce-scatter (FSDP) per optimizer step instead of one per micro-batch."""
    if enabled:
        yield
        return
    if is_sharded(model):
        sharded = cast("FSDPModule", model)
        sharded.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            sharded.set_requires_gradient_sync(True)
        return
    no_sync = getattr(model, "no_sync", None)  # DDP's; a plain module has none
    with (no_sync() if no_sync is not None else nullcontext()):
        yield


def full_model_on_rank_zero(model: nn.Module, build, device: torch.device, world: World) -> nn.Module | None:
    """A plain, unsharded copy of the trained model on rank 0 (None on the others), for the evaluation that
    rank 0 runs alone: DDP already holds a full replica; FSDP gathers its shards (every rank takes part in
    the gather, through host memory) into a model built by `build()`."""
    if not is_sharded(model):
        return unwrap(model) if world.is_main else None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if not world.is_main:
        return None
    plain = build()
    plain.load_state_dict(state)
    return plain.to(device)

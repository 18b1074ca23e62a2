"""The trainer (docs/method.md §5): AdamW with the papers' defaults, cosine schedule with warmup to lr/10, gradient
clipping and accumulation, mixed precision on GPU, checkpoint/resume, periodic validation: one loop for
every experiment, given a batch source and a loss (see `loop.py`), on one device or on several processes
under torch.distributed (DDP or FSDP2, sharded checkpoints: `distributed.py`, `sharded_checkpoint.py`).

It knows nothing of Ray or MLflow: progress goes to a `TrainerCallback` (a sink), which the orchestrator
implements to forward metrics to Ray Tune.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_attributes

_PUBLIC = {  # name -> the submodule it lives in
    "TrainerCallback": "callbacks", "CheckpointMismatchError": "checkpoint_file",
    "CheckpointStore": "checkpoint", "CheckpointUnreadable": "checkpoint", "TrainConfig": "config",
    "DistributedConfig": "distributed_config", "Parallelism": "distributed_config", "World": "distributed",
    "BatchSource": "loop", "NonFiniteLossError": "loop", "TrainResult": "loop", "lm_loss": "loop", "train": "loop",
    "Precision": "precision", "resolve_device": "precision", "resolve_precision": "precision",
    "cosine_lr": "schedule", "make_optimizer": "schedule",
}
__all__ = list(_PUBLIC)

if TYPE_CHECKING:
    from .callbacks import TrainerCallback
    from .checkpoint import CheckpointStore, CheckpointUnreadable
    from .checkpoint_file import CheckpointMismatchError
    from .config import TrainConfig
    from .distributed import World
    from .distributed_config import DistributedConfig, Parallelism
    from .loop import BatchSource, NonFiniteLossError, TrainResult, lm_loss, train
    from .precision import Precision, resolve_device, resolve_precision
    from .schedule import cosine_lr, make_optimizer

__getattr__, __dir__ = lazy_attributes(__name__, _PUBLIC)

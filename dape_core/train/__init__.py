"""The trainer (docs/method.md §5): AdamW with the papers' defaults, cosine schedule with warmup to lr/10, gradient
clipping and accumulation, mixed precision on GPU, checkpoint/resume, periodic validation: one loop for
every experiment, given a batch source and a loss (see `loop.py`), on one device or on several processes
under torch.distributed (DDP or FSDP2, sharded checkpoints: `distributed.py`, `sharded_checkpoint.py`).

It knows nothing of Ray or MLflow: progress goes to a `TrainerCallback` (a sink), which the orchestrator
implements to forward metrics to Ray Tune.
"""

from .callbacks import TrainerCallback
from .checkpoint import CheckpointMismatchError, CheckpointStore, CheckpointUnreadable
from .config import TrainConfig
from .distributed import DistributedConfig, Parallelism, World
from .loop import BatchSource, NonFiniteLossError, TrainResult, lm_loss, train
from .precision import Precision, resolve_device, resolve_precision
from .schedule import cosine_lr, make_optimizer

__all__ = [
    "TrainerCallback", "CheckpointMismatchError", "CheckpointStore", "CheckpointUnreadable", "TrainConfig",
    "DistributedConfig", "Parallelism", "World",
    "BatchSource", "NonFiniteLossError", "TrainResult", "lm_loss", "train", "Precision", "resolve_device",
    "resolve_precision", "cosine_lr", "make_optimizer",
]

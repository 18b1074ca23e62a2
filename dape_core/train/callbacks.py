"""How the trainer reports: a small sink interface. The trainer knows nothing of Ray or MLflow."""

from __future__ import annotations

from pathlib import Path


class TrainerCallback:
    """No-op base; override what you need. Duck-typed objects work too: only `on_step` is required, the
    other hooks are called when present.

    Under torch.distributed the trainer calls the callback on rank 0 only. A callback whose reporting is
    itself collective (every rank must call it the same number of times, as Ray Train's `report` must be)
    sets `all_ranks = True`: it is then called on every rank, at the same steps and with the same, global
    values (the loss averaged over the ranks)."""

    all_ranks: bool = False

    def on_step(self, step: int, loss: float, lr: float) -> None:
        """Every `train.log_every` steps and at the last: the smoothed training loss."""

    def on_validation(self, step: int, val_loss: float) -> None:
        """Every `train.eval_every` steps and at the last: mean loss on fixed held-out windows."""

    def on_checkpoint(self, step: int, path: Path) -> None:
        """After a checkpoint was written (atomically) to `path`."""

    def on_checkpoint_set_aside(self, note: str) -> None:
        """Before training starts, when the checkpoint to resume from could not be used: `note` names the
        file, why, and where it was moved; training starts from scratch."""


def notify(callback, hook: str, *args) -> None:
    method = getattr(callback, hook, None) if callback is not None else None
    if method is not None:
        method(*args)

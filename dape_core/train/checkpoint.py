"""Mid-trial checkpoints of a one-worker run: one file, replaced atomically, read back with
`torch.load(weights_only=True)` (a multi-worker run writes sharded ones beside it: `sharded_checkpoint.py`).

A checkpoint holds everything the next step depends on (model, optimizer, loss scaler, step, the torch RNG
state and the batch source's, the smoothed loss), so a resumed trial continues the same loss curve. It also
holds a fingerprint of the config that produced it: a checkpoint of another config is never resumed from
(that would silently mix two runs).

A checkpoint that cannot be used (truncated by a full disk or a kill during a copy, random bytes, another
trial's file copied in) must neither stop the trial for ever nor be resumed from: `resume_state` names it,
renames it aside (`trainer.pt.corrupt-<time>`, kept for inspection) and lets the trial start from scratch.
Its explanation is this module's own: torch's, for a file a weights-only load refuses, advises loading it
with `weights_only=False`, which would run whatever code the file holds.
"""

from __future__ import annotations

import os
import pickle
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .checkpoint_file import CheckpointUnreadable, check_header, write_atomically

if TYPE_CHECKING:
    from .sharded_checkpoint import ShardedCheckpoints

FORMAT = 2  # 2: the batch source's state under rng/batches, and tokens_seen
REQUIRED_KEYS = frozenset({"format", "fingerprint", "step", "model", "optimizer", "scaler", "rng"})


class CheckpointStore:
    FILE = "trainer.pt"

    def __init__(self, directory: str | Path, fingerprint: str):
        self.directory = Path(directory)
        self.fingerprint = fingerprint

    @property
    def path(self) -> Path:
        return self.directory / self.FILE

    def exists(self) -> bool:
        """A one-worker checkpoint (`trainer.pt`) is there."""
        return self.path.is_file()

    @property
    def sharded(self) -> "ShardedCheckpoints":
        """The multi-worker checkpoints of the same run, in `sharded/` (see `sharded_checkpoint.py`)."""
        from .sharded_checkpoint import ShardedCheckpoints

        return ShardedCheckpoints(self.directory / "sharded", self.fingerprint)

    def remove(self) -> None:
        """Delete both formats (a finished run's checkpoints need not stay on disk)."""
        self.path.unlink(missing_ok=True)
        self.sharded.remove()

    def save(self, state: dict) -> Path:
        """Write atomically (`write_atomically`): a crash leaves the previous checkpoint whole."""
        self.directory.mkdir(parents=True, exist_ok=True)
        record = {"format": FORMAT, "fingerprint": self.fingerprint, **state}
        return write_atomically(self.path, lambda handle: torch.save(record, handle))

    def load(self, device: torch.device) -> dict:
        """The checkpoint's state. Raises CheckpointUnreadable (CheckpointMismatchError for another config's)."""
        try:
            state = torch.load(self.path, map_location=device, weights_only=True)
        except Exception as error:
            raise CheckpointUnreadable(f"checkpoint {self.path} cannot be read: {unreadable_reason(error)}") from None
        if not isinstance(state, dict) or not REQUIRED_KEYS <= state.keys():
            raise CheckpointUnreadable(f"checkpoint {self.path} is not a checkpoint of this trainer (its keys: "
                                       f"{sorted(state)[:8] if isinstance(state, dict) else type(state).__name__})")
        check_header(state, self.path, FORMAT, self.fingerprint)
        return state

    def set_aside(self) -> Path:
        """Rename the checkpoint to `trainer.pt.corrupt-<time>` beside it (kept for inspection); returns that."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        target = self.path.with_name(f"{self.FILE}.corrupt-{stamp}")
        number = 1
        while target.exists():
            number += 1
            target = self.path.with_name(f"{self.FILE}.corrupt-{stamp}-{number}")
        os.replace(self.path, target)
        return target

    def resume_state(self, device: torch.device) -> tuple[dict | None, str | None]:
        """What a trial resumes from: (state, None); (None, None) where there is no checkpoint; (None, note)
        where the checkpoint could not be used and was set aside: `note` says which file, why, and where it
        went, and the trial starts from scratch."""
        if not self.exists():
            return None, None
        try:
            return self.load(device), None
        except CheckpointUnreadable as error:
            moved = self.set_aside()
            return None, f"{error}; set aside as {moved.name}, the trial starts from scratch"


def unreadable_reason(error: Exception) -> str:
    """Why torch could not load a checkpoint, in this project's words (never torch's advice to load it
    with weights_only=False)."""
    text = str(error)
    if isinstance(error, EOFError) or "PytorchStreamReader" in text or "central directory" in text \
            or isinstance(error, zipfile.BadZipFile):
        return "the file is truncated or is not a torch checkpoint"
    if isinstance(error, pickle.UnpicklingError) or "weights_only" in text or "Unsupported global" in text:
        return "it holds objects other than tensors and plain values, which a weights-only load refuses to run"
    return type(error).__name__

"""Mid-trial checkpoints of a one-worker run: one file, replaced atomically, read back with
`torch.load(weights_only=True)` (a multi-worker run writes sharded ones beside it: `sharded_checkpoint.py`).

A checkpoint holds everything the next step depends on (model, optimizer, loss scaler, step, the torch RNG
state and the batch source's, the smoothed loss), so a resumed trial continues the same loss curve. It also
holds a fingerprint of the config that produced it: resuming under another config is an error, not a
silent mix of two runs.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

FORMAT = 2  # 2: the batch source's state under rng/batches, and tokens_seen


class CheckpointMismatchError(RuntimeError):
    """The checkpoint on disk was written by a different model/data/train config."""


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
        """Write to a temporary file, then rename over the previous one: a crash leaves the old one whole."""
        self.directory.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(self.FILE + ".tmp")
        with temporary.open("wb") as handle:
            torch.save({"format": FORMAT, "fingerprint": self.fingerprint, **state}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.path)
        return self.path

    def load(self, device: torch.device) -> dict:
        state = torch.load(self.path, map_location=device, weights_only=True)
        if state.get("format") != FORMAT:
            raise CheckpointMismatchError(f"{self.path}: checkpoint format {state.get('format')!r}, expected {FORMAT}")
        if state.get("fingerprint") != self.fingerprint:
            raise CheckpointMismatchError(
                f"{self.path} was written by a different model/data/train config (fingerprint "
                f"{state.get('fingerprint')} != {self.fingerprint}); use another checkpoint directory or start fresh"
            )
        return state

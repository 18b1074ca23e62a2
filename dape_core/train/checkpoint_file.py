"""What both checkpoint formats share (the one-worker `trainer.pt` of `checkpoint.py`, the sharded folders of
`sharded_checkpoint.py`): the one atomic writer of their files, the one check of their header (format and config
fingerprint), and the errors a checkpoint that cannot be resumed from raises.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO, Callable


class CheckpointUnreadable(RuntimeError):
    """The checkpoint file cannot be used to resume: damaged, not a checkpoint of this trainer, or another
    config's (CheckpointMismatchError)."""


class CheckpointMismatchError(CheckpointUnreadable):
    """The checkpoint on disk was written by a different model/data/train config."""


def write_atomically(path: Path, save: Callable[[BinaryIO], object]) -> Path:
    """`save(handle)` into a temporary file of this process beside `path`, synced, then renamed over `path`: a
    crash leaves the previous file whole, and two processes never write into one temporary file."""
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with temporary.open("wb") as handle:
        save(handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    return path


def check_header(record: dict, where: Path, expected_format: int, fingerprint: str, kind: str = "checkpoint") -> None:
    """Raise CheckpointMismatchError where `record` (a checkpoint's header, read from `where`) is of another
    format than `expected_format` or was written by another config than `fingerprint`'s."""
    if record.get("format") != expected_format:
        raise CheckpointMismatchError(f"{where}: {kind} format {record.get('format')!r}, expected {expected_format}")
    if record.get("fingerprint") != fingerprint:
        raise CheckpointMismatchError(
            f"{where} was written by a different model/data/train config (fingerprint {record.get('fingerprint')} "
            f"!= {fingerprint}); use another checkpoint directory or start fresh")

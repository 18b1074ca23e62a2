"""Two checks on folders that the store, the reports and the CLI share (standard library only, so that the CLI
can check its options without loading the tracking code):

- `unwritable`: whether a folder can be created and written, asked before anything runs;
- `folder_lock`: a lock held on a folder itself (flock on its descriptor), so that no lock file is left behind
  and the lock goes with its holder's death.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def unwritable(folder: Path) -> OSError | None:
    """None when `folder` exists (created here if need be) and a file can be written into it, else the error."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        return error
    return None


@contextmanager
def folder_lock(folder: Path, exclusive: bool = True) -> Iterator[None]:
    """Hold a lock on `folder` (exclusive, or shared among readers) until the block ends."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        os.close(descriptor)  # closing releases the lock, as does the process's death

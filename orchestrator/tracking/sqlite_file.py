"""Checks on an embedded SQLite store's file before MLflow opens it, and the lock that serialises its creation.

MLflow, handed a damaged file, retries for minutes with a screen of SQLAlchemy warnings per attempt, and
handed an empty one, silently creates its tables. So the file is looked at first, with the standard library
only: a zero-byte file, a file that is not SQLite, a file shorter than its own header says (truncated), or
an SQLite file without MLflow's tables is refused in one paragraph, before anything is written.

Two `orchestrator run` started at once on a new store would both create MLflow's tables and one would die
("duplicate column name"): `store_lock` takes an exclusive lock on the store's folder (flock on the folder
itself, so that no lock file is left behind) while a writer initialises the store; readers take it shared.
"""

from __future__ import annotations

import os
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..errors import StoreLocked, StoreUnusable
from ..folders import folder_lock, unwritable

_MAGIC = b"SQLite format 3\x00"
LOCK_WAIT_S = 30  # how long a read waits for another process's lock on the store
_MLFLOW_TABLES = ("experiments", "runs", "alembic_version")


def unusable(path: Path, reason: str) -> StoreUnusable:
    return StoreUnusable(
        f"The tracking store {path} cannot be used: {reason}. If it was damaged, restore it from a backup; to "
        "start a new store, move the file away or pass another --tracking-uri. Nothing was changed.")


def _header_problem(path: Path, size: int) -> str | None:
    """Why the file cannot be an intact SQLite database, judged from its 100-byte header; None if it can."""
    if size == 0:
        return "the file is empty (0 bytes), it holds no MLflow tables"
    with path.open("rb") as handle:
        header = handle.read(100)
    if len(header) < 100 or not header.startswith(_MAGIC):
        return "the file is not an SQLite database"
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    size_is_valid = header[24:28] == header[92:96]  # SQLite's rule for trusting the in-header size
    wal = path.with_name(path.name + "-wal")
    if size_is_valid and pages and size < pages * page_size and not wal.exists():
        return f"the file is truncated ({size} bytes where its header says {pages * page_size})"
    return None


def is_lock(error: BaseException) -> bool:
    """SQLite's "database is locked" (another connection holds the lock past the wait): busy, not damaged."""
    return isinstance(error, sqlite3.OperationalError) and ("locked" in str(error) or "busy" in str(error))


def locked(where: str, error: BaseException, waited: float | None, kept: str = "Nothing was changed.") -> StoreLocked:
    """The one paragraph for a store another process keeps locked; `kept`: what became of the command's work."""
    wait = f"SQLite waited {waited:g}s for it" if waited is not None else "SQLite gave up waiting for it"
    return StoreLocked(
        f"The tracking store {where} is locked by another process ({wait}: {error}). The store is not damaged: "
        "let the other writer finish (another orchestrator, an `mlflow` command or server, a sqlite3 shell "
        f"holding a transaction), then run the same command again. {kept}")


def _table_problem(path: Path) -> str | None:
    """Why the SQLite file is not an MLflow store (read-only access: nothing is created); None if it is.
    Raises StoreLocked where another process holds the file's lock past LOCK_WAIT_S."""
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=LOCK_WAIT_S)
        try:
            names = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            connection.close()
    except sqlite3.DatabaseError as error:
        if is_lock(error):
            raise locked(str(path), error, LOCK_WAIT_S) from None
        return f"SQLite cannot read it ({error})"
    missing = [name for name in _MLFLOW_TABLES if name not in names]
    if missing:
        return f"it is an SQLite file without MLflow's tables ({', '.join(missing)} missing)"
    return None


def check_readable(path: Path) -> None:
    """Raises StoreUnusable where the existing file is not an intact MLflow store. Reads only."""
    problem = _header_problem(path, path.stat().st_size) or _table_problem(path)
    if problem:
        raise unusable(path, problem)


def check_folder_writable(path: Path, nothing: str = "Nothing was run.") -> None:
    """Raises StoreUnusable where the store's folder cannot be created or written (SQLite writes its journal
    beside the file, so a read-only folder fails every write, after minutes of MLflow's retries). `nothing`
    ends the message: what the command did not do."""
    folder = path.parent
    error = unwritable(folder)
    if error is not None:
        raise StoreUnusable(
            f"The tracking store's folder {folder} is not writable ({error.strerror or error}). Give a writable "
            "place with --tracking-uri sqlite:////path/to/mlflow.db (or MLFLOW_TRACKING_URI), or fix the "
            f"folder's permissions. {nothing}") from error


def check_file_writable(path: Path, nothing: str = "Nothing was run.") -> None:
    """Raises StoreUnusable where the store's file exists and cannot be written (its mode, or a read-only mount)."""
    if path.exists() and not os.access(path, os.W_OK):
        raise StoreUnusable(f"The tracking store {path} is read-only. Make it writable or pass another "
                            f"--tracking-uri. {nothing}")


def check_store_writable(path: Path, nothing: str = "Nothing was run.") -> None:
    """What `run` checks before it writes anything, for a command that writes into an existing store
    (`evaluate`): its folder and its file can be written. Raises StoreUnusable, ending with `nothing`."""
    check_folder_writable(path, nothing)
    check_file_writable(path, nothing)


def check_writable(path: Path) -> None:
    """Raises StoreUnusable where the file exists and is read-only or not an intact MLflow store (an SQLite
    file without tables yet is fine: MLflow creates them). Call it holding `store_lock`, so that a store
    another process is creating is not mistaken for an empty one."""
    if not path.exists():
        return
    check_file_writable(path)
    problem = _header_problem(path, path.stat().st_size)
    if problem is None:
        table_problem = _table_problem(path)
        problem = table_problem if table_problem and "without MLflow's tables" not in table_problem else None
    if problem:
        raise unusable(path, problem)


@contextmanager
def store_lock(path: Path, exclusive: bool = True) -> Iterator[None]:
    """Hold a lock on the store's folder (exclusive to create or initialise the store, shared to read it)."""
    with folder_lock(path.parent, exclusive):
        yield

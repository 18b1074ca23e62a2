"""A SQLite store moved or copied with its artifacts folder works where it lands.

MLflow records absolute artifact locations: the study's experiment keeps `file:///…/mlruns/artifacts` (the
folder beside the database, store.py) and each run `…/artifacts/<run id>/artifacts`. A store copied to a
colleague's folder would still read the original's weights and write new artifacts (an evaluation's heat maps,
a resumed trial's files) into the original project. So the store's own place is the rule: the artifacts of a
SQLite store are the `artifacts/` folder beside its file. When a store of this tool records another place:

- its `artifacts/` folder is there (moved or copied with it): the recorded locations are rewritten to it, in
  one transaction under the store's lock (`relocate`), before MLflow opens the store;
- it is missing (the database was copied alone): commands that write artifacts refuse in one paragraph, naming
  both folders, instead of writing into the recorded place; the read-only ones go on (they read no artifacts).

Only experiments this tool created (tagged `orchestrator.study`) are looked at; a server's store is the
server's business. Standard library only.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from ..errors import StoreUnusable
from . import sqlite_file
from .sqlite_file import is_lock, locked, store_lock

ARTIFACTS_FOLDER = "artifacts"
_STUDY_TAG = "orchestrator.study"  # store.STUDY_TAG (store.py imports this module)


class ArtifactsMissing(StoreUnusable):
    """The store records its artifacts in another place, and its own artifacts folder is missing."""


@dataclass(frozen=True)
class Moved:
    """Experiments of a store whose recorded artifact location is not the folder beside the store."""

    own: Path  # the artifacts folder beside the store's file
    recorded: dict[str, str]  # experiment id -> the location it records
    relocated: dict[str, Path]  # experiment id -> where that location is beside this store

    @property
    def here(self) -> bool:
        return self.own.is_dir()


def artifact_root(database: Path) -> Path:
    return database.parent / ARTIFACTS_FOLDER


def _local_path(uri: str) -> Path | None:
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    return Path(uri) if parsed.scheme == "" and uri.startswith("/") else None


def _same(recorded: Path, own: Path) -> bool:
    if recorded == own:
        return True
    try:
        return recorded.exists() and own.exists() and os.path.samefile(recorded, own)
    except OSError:
        return False


def moved(database: Path) -> Moved | None:
    """What `database` records elsewhere than beside itself, or None (read-only)."""
    own = artifact_root(database)
    waited = sqlite_file.LOCK_WAIT_S
    connection = sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True, timeout=waited)
    try:
        rows = connection.execute(
            "SELECT e.experiment_id, e.artifact_location FROM experiments e JOIN experiment_tags t "
            "ON t.experiment_id = e.experiment_id WHERE t.key = ?", (_STUDY_TAG,)).fetchall()
    except sqlite3.DatabaseError as error:  # no tables yet: a new store; locked: busy, said as such
        if is_lock(error):
            raise locked(str(database), error, waited) from None
        return None
    finally:
        connection.close()
    recorded, relocated = {}, {}
    for experiment_id, location in rows:
        path = _local_path(location or "")
        root = _artifacts_ancestor(path) if path is not None else None
        if path is not None and root is not None and not _same(root, own):
            recorded[str(experiment_id)] = location
            relocated[str(experiment_id)] = own / path.relative_to(root)
    return Moved(own, recorded, relocated) if recorded else None


def _artifacts_ancestor(path: Path) -> Path | None:
    """The nearest of `path` and its parents named `artifacts`: the store's artifact root in this tool's layout
    (the experiment's location is that folder, or `artifacts/<experiment id>` where an MLflow server with
    `--default-artifact-root` created it). None for another layout, which is left alone."""
    for candidate in (path, *path.parents):
        if candidate.name == ARTIFACTS_FOLDER:
            return candidate
    return None


def missing_message(database: Path, found: Moved) -> str:
    elsewhere = sorted(set(found.recorded.values()))
    return (f"The tracking store {database} records its artifacts (the trials' models, logs, heat maps) in "
            f"{', '.join(elsewhere)}, but its own artifacts folder {found.own} is missing: the store was moved or "
            "copied without it. Copy that artifacts folder beside the store (to "
            f"{found.own}) and run again; nothing is written into the recorded place. Nothing was changed.")


def relocate(database: Path, require: bool = True) -> int:
    """Point the store's recorded artifact locations at the artifacts folder beside it; returns how many
    experiments were rewritten. Where that folder is missing: raises ArtifactsMissing with `require`, else
    changes nothing (a reader can go on)."""
    if not database.is_file():
        return 0
    found = moved(database)
    if found is None:
        return 0
    if not found.here:
        if require:
            raise ArtifactsMissing(missing_message(database, found))
        return 0
    if not os.access(database, os.W_OK):
        return 0  # read-only: nothing can be rewritten (and nothing can be written either)
    with store_lock(database):
        found = moved(database)  # another process may have relocated it meanwhile
        if found is None or not found.here:
            return 0
        connection = sqlite3.connect(str(database), timeout=30)
        try:
            with connection:  # one transaction
                for experiment_id, location in found.recorded.items():
                    old, new = location.rstrip("/"), found.relocated[experiment_id].resolve().as_uri()
                    connection.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = ?",
                                       (new, experiment_id))
                    connection.execute(
                        "UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?) "
                        "WHERE experiment_id = ? AND substr(artifact_uri, 1, ?) = ?",
                        (new, len(old) + 1, experiment_id, len(old), old))
        finally:
            connection.close()
        return len(found.recorded)


def require_artifacts_here(tracking_uri: str) -> None:
    """For a command that writes artifacts into a store it opened for reading (`evaluate`): raises
    ArtifactsMissing where a SQLite store records its artifacts elsewhere and has none beside it."""
    from .uri import sqlite_path

    database = sqlite_path(tracking_uri)
    if database is not None:
        relocate(database, require=True)

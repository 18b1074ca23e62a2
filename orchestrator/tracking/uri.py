"""Where a study's tracking store is: the `--tracking-uri` flag, else MLFLOW_TRACKING_URI, else the embedded
SQLite store under ./mlruns. Only names and paths here: nothing imports MLflow."""

from __future__ import annotations

import os
from pathlib import Path

_SQLITE = "sqlite:///"


def default_tracking_uri(root: Path | None = None) -> str:
    """The embedded store: SQLite under ./mlruns (MLflow 3 refuses the plain file store)."""
    folder = (root or Path.cwd()) / "mlruns"
    return f"{_SQLITE}{(folder / 'mlflow.db').resolve()}"


def resolve_tracking_uri(flag: str | None) -> str:
    return flag or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()


def sqlite_path(tracking_uri: str) -> Path | None:
    """The database file of an embedded SQLite store; None for a tracking server."""
    return Path(tracking_uri.removeprefix(_SQLITE)) if tracking_uri.startswith(_SQLITE) else None


def store_missing(tracking_uri: str) -> Path | None:
    """The SQLite file a store should be in when it does not exist yet (a study never run there), else None.
    Reading such a store must not create it, so the read-only commands check this first."""
    path = sqlite_path(tracking_uri)
    return path if path is not None and not path.is_file() else None


def is_server(tracking_uri: str) -> bool:
    return tracking_uri.startswith(("http://", "https://"))


def ui_command(tracking_uri: str) -> str:
    if is_server(tracking_uri):
        return f"open {tracking_uri}"
    return f"mlflow ui --backend-store-uri {tracking_uri}"

"""Where a study's tracking store is: the `--tracking-uri` flag (`tracking_uri=` in Python), else
MLFLOW_TRACKING_URI, else the embedded SQLite store `mlruns/mlflow.db` in the study's project folder (the
folder holding its `studies/` folder, else the current folder: study/locate.py). Only names and paths
here: nothing imports MLflow."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..study.locate import project_folder

_SQLITE = "sqlite:///"
ENV = "MLFLOW_TRACKING_URI"


def default_tracking_uri(root: Path | None = None) -> str:
    """The embedded store: SQLite under <root>/mlruns (MLflow 3 refuses the plain file store)."""
    folder = (root or Path.cwd()) / "mlruns"
    return f"{_SQLITE}{(folder / 'mlflow.db').resolve()}"


@dataclass(frozen=True)
class StoreChoice:
    """A tracking URI and how it was chosen, so that an error can say what was tried."""

    uri: str
    how: str


def choose_store(given: str | None, study_path: str | Path | None = None) -> StoreChoice:
    if given:
        return StoreChoice(given, "given")
    if os.environ.get(ENV):
        return StoreChoice(os.environ[ENV], f"from {ENV}")
    folder = project_folder(study_path)
    whose = f"of {study_path}" if study_path is not None else "of a study without its file"
    return StoreChoice(default_tracking_uri(folder),
                       f"the default store {whose}: mlruns/mlflow.db in its project folder {folder}; {ENV} is not set")


def resolve_tracking_uri(flag: str | None, study_path: str | Path | None = None) -> str:
    return choose_store(flag, study_path).uri


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


REPORTS = "reports"


def same_store(first: str, second: str) -> bool:
    """Two tracking URIs name one store: the same SQLite file (however its path is written), else the same text."""
    paths = sqlite_path(first), sqlite_path(second)
    if paths[0] is not None and paths[1] is not None:
        return paths[0].expanduser().resolve() == paths[1].expanduser().resolve()
    return first.rstrip("/") == second.rstrip("/")


def reports_root(tracking_uri: str, study_path: str | Path | None = None) -> Path:
    """Where the reports of a store go (each study's in `<root>/<study>/`): a report belongs to its store, so that
    a command reading another store (`--tracking-uri`) never overwrites the project's own (docs/protocol.md).

    - the project's own store (the one chosen without --tracking-uri: MLFLOW_TRACKING_URI, else the project's
      mlruns/mlflow.db): `reports/` in the project folder, as always;
    - another SQLite store: `reports/` beside its database file (a copy in /tmp/x/mlflow.db: /tmp/x/reports/);
    - another tracking server (or a database file in the project folder itself): `reports/store-<its address>/`
      in the project folder.
    """
    project = project_folder(study_path)
    if same_store(tracking_uri, choose_store(None, study_path).uri):
        return project / REPORTS
    database = sqlite_path(tracking_uri)
    if database is not None:
        beside = database.expanduser().resolve().parent / REPORTS
        if beside.resolve() != (project / REPORTS).resolve():
            return beside
    return project / REPORTS / store_slug(tracking_uri)  # a server, or a database file in the project folder


def store_slug(tracking_uri: str) -> str:
    """A folder name for a store: `store-` and its address without the scheme, every other character an
    underscore ("http://mlflow:5000" -> "store-mlflow_5000"), apart from any study's folder."""
    address = re.sub(r"^[a-z0-9+.-]*://", "", tracking_uri.strip().rstrip("/"), flags=re.IGNORECASE)
    return "store-" + (re.sub(r"[^A-Za-z0-9.-]+", "_", address).strip("_.") or "unnamed")

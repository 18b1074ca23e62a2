"""Reading a study's runs: through MLflow's client, or, for an embedded SQLite store, straight from its tables.

Importing MLflow takes longer than a read-only command may (`orchestrator plan`, `status`, `report`: several
seconds of CPU for MLflow and SQLAlchemy). An embedded store is an SQLite file in MLflow's schema, whose
tables for experiments, runs, tags, params and metrics have kept their shape since MLflow 1.x; the
`SQLiteReader` reads those, read-only, with the standard library and returns the same run records as
MLflow's client (tests/test_run_record.py's `test_sqlite_reader_returns_what_mlflows_client_returns`
compares the two on a real store). Every write still goes through
MLflow's client, and a tracking server is read through it too.

Those tables are MLflow's private schema, which a later MLflow may migrate. So `reader_for` reads the store's
schema revision first (alembic's `alembic_version` table, which MLflow's migrations keep) and reads directly
only a store of a revision in `TESTED_REVISIONS`; any other store is read through MLflow's client, with one
line saying so, and MLflow then says for itself whether it can read that store.
"""

from __future__ import annotations

import logging
import math
import sqlite3
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from .sqlite_file import is_lock, locked

# The schema revisions SQLiteReader is tested with (tests/test_readers.py): the one MLflow 3.17 creates and
# migrates stores to. Add a revision here only with the tests passing on a store of it.
TESTED_REVISIONS = frozenset({"dc11669786a5"})

_log = logging.getLogger(__name__)


@dataclass
class RunInfo:
    run_id: str
    run_name: str
    status: str
    start_time: int | None
    end_time: int | None
    experiment_id: str
    artifact_uri: str | None = None


@dataclass
class RunData:
    tags: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)  # each metric's latest value


@dataclass
class StoredRun:
    """A run as `mlflow.entities.Run` presents the parts the orchestrator reads: `info` and `data`."""

    info: RunInfo
    data: RunData


@dataclass(frozen=True)
class MetricPoint:
    key: str
    value: float
    step: int
    timestamp: int


class SQLiteReader:
    """Read-only access to an MLflow SQLite store (nothing is created or locked for writing)."""

    def __init__(self, path: Path):
        self.path = path

    def _query(self, sql: str, args: tuple = ()) -> list[tuple]:
        try:
            with closing(sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=60)) as db:
                return db.execute(sql, args).fetchall()
        except sqlite3.OperationalError as error:
            if is_lock(error):  # busy, not damaged: one paragraph saying so
                raise locked(str(self.path), error, 60, "What was recorded before is kept.") from None
            raise

    def revision(self) -> str | None:
        """The store's schema revision (the row of alembic's `alembic_version` table), None if it holds none."""
        rows = self._query("SELECT version_num FROM alembic_version")
        return str(rows[0][0]) if len(rows) == 1 else None

    def experiment_ids(self) -> list[str]:
        """Every active experiment of the store, newest first (the order of MLflow's search_experiments)."""
        return [str(row[0]) for row in self._query("SELECT experiment_id FROM experiments WHERE lifecycle_stage = "
                                                   "'active' ORDER BY creation_time DESC, experiment_id")]

    def experiments_tagged(self, tag: str) -> list[str]:
        """The active experiments that carry the experiment tag `tag` (any value), oldest first."""
        return [str(row[0]) for row in self._query(
            "SELECT e.experiment_id FROM experiments e JOIN experiment_tags t ON t.experiment_id = e.experiment_id "
            "AND t.key = ? WHERE e.lifecycle_stage = 'active' ORDER BY e.experiment_id", (tag,))]

    def experiment_names(self, tag: str) -> list[str]:
        """The names of the active experiments that carry the experiment tag `tag`."""
        return sorted(str(row[0]) for row in self._query(
            "SELECT e.name FROM experiments e JOIN experiment_tags t ON t.experiment_id = e.experiment_id "
            "AND t.key = ? WHERE e.lifecycle_stage = 'active'", (tag,)))

    def experiment(self, name: str) -> tuple[str, dict[str, str]] | None:
        """(experiment id, tags) of the experiment of that name, or None."""
        found = self._query("SELECT experiment_id FROM experiments WHERE name = ? ORDER BY experiment_id", (name,))
        if not found:
            return None
        experiment_id = found[0][0]
        tags = dict(self._query("SELECT key, value FROM experiment_tags WHERE experiment_id = ?", (experiment_id,)))
        return str(experiment_id), tags

    def deleted(self, experiment_id: str) -> bool:
        """Whether the experiment is in MLflow's trash (deleted, not yet removed for good)."""
        found = self._query("SELECT lifecycle_stage FROM experiments WHERE experiment_id = ?", (experiment_id,))
        return bool(found) and found[0][0] == "deleted"

    def runs(self, experiment_id: str, tag: str, value: str) -> list[StoredRun]:
        """The experiment's active runs whose tag `tag` is `value`, newest first (MLflow's default order)."""
        rows = self._query(
            "SELECT r.run_uuid, r.name, r.status, r.start_time, r.end_time, r.artifact_uri FROM runs r "
            "JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = ? AND t.value = ? "
            "WHERE r.experiment_id = ? AND r.lifecycle_stage = 'active' ORDER BY r.start_time DESC, r.run_uuid",
            (tag, value, int(experiment_id)))
        runs = {row[0]: StoredRun(RunInfo(row[0], row[1] or "", row[2], row[3], row[4], experiment_id, row[5]),
                                  RunData()) for row in rows}
        if not runs:
            return []
        marks = ",".join("?" * len(runs))
        ids = tuple(runs)
        for run_id, key, text in self._query(f"SELECT run_uuid, key, value FROM tags WHERE run_uuid IN ({marks})", ids):
            runs[run_id].data.tags[key] = text
        for run_id, key, text in self._query(f"SELECT run_uuid, key, value FROM params WHERE run_uuid IN "
                                             f"({marks})", ids):
            runs[run_id].data.params[key] = text
        for run_id, key, number, is_nan in self._query(
                f"SELECT run_uuid, key, value, is_nan FROM latest_metrics WHERE run_uuid IN ({marks})", ids):
            runs[run_id].data.metrics[key] = math.nan if is_nan else float(number)
        for run in runs.values():  # MLflow keeps the name in the mlflow.runName tag too
            run.info.run_name = run.info.run_name or run.data.tags.get("mlflow.runName", "")
        return list(runs.values())

    def metric_history(self, run_id: str, key: str) -> list[MetricPoint]:
        rows = self._query("SELECT value, step, timestamp, is_nan FROM metrics WHERE run_uuid = ? AND key = ? "
                           "ORDER BY timestamp, step", (run_id, key))
        return [MetricPoint(key, math.nan if is_nan else float(value), int(step), int(stamp))
                for value, step, stamp, is_nan in rows]


class ClientReader:
    """The same reads through MLflow's client (a tracking server, or a store the writer already opened)."""

    def __init__(self, client):
        self.client = client

    def experiment_ids(self) -> list[str]:
        return [experiment.experiment_id for experiment in self.client.search_experiments()]

    def experiments_tagged(self, tag: str) -> list[str]:
        return sorted((experiment.experiment_id for experiment in self.client.search_experiments(max_results=50000)
                       if tag in experiment.tags), key=lambda value: (len(value), value))

    def experiment_names(self, tag: str) -> list[str]:
        return sorted(experiment.name for experiment in self.client.search_experiments(max_results=50000)
                      if tag in experiment.tags)

    def experiment(self, name: str) -> tuple[str, dict[str, str]] | None:
        found = self.client.get_experiment_by_name(name)
        return (found.experiment_id, dict(found.tags)) if found is not None else None

    def deleted(self, experiment_id: str) -> bool:
        return self.client.get_experiment(experiment_id).lifecycle_stage == "deleted"

    def runs(self, experiment_id: str, tag: str, value: str) -> list:
        return self.client.search_runs([experiment_id], filter_string=f"tags.`{tag}` = '{value}'", max_results=50000,
                                       order_by=["attributes.start_time DESC"])

    def metric_history(self, run_id: str, key: str) -> list:
        return self.client.get_metric_history(run_id, key)


def reader_for(tracking_uri: str, client=None) -> SQLiteReader | ClientReader:
    """The store's reader: an embedded SQLite store of a tested schema revision read directly, anything else
    through MLflow's client (`client` where the caller has one). Raises StoreUnusable where MLflow cannot read
    a SQLite store of another revision either (an older one it wants upgraded, say): nothing is changed."""
    from .uri import sqlite_path

    path = sqlite_path(tracking_uri)
    if path is None:
        from mlflow.tracking import MlflowClient

        return ClientReader(client or MlflowClient(tracking_uri))
    direct = SQLiteReader(path)
    revision = direct.revision()
    if revision in TESTED_REVISIONS:
        return direct
    _log.warning("The tracking store %s has MLflow schema revision %s, not %s that the direct reader is tested "
                 "with: reading it through MLflow's client (slower).", path, revision,
                 " or ".join(sorted(TESTED_REVISIONS)))
    return ClientReader(_sqlite_client(tracking_uri, path, client))


def _sqlite_client(tracking_uri: str, path: Path, client=None):
    """MLflow's client on the SQLite store; StoreUnusable where MLflow refuses the store (it checks the schema
    revision when it opens one, and wants an older store upgraded)."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from .sqlite_file import unusable

    try:
        client = client or MlflowClient(tracking_uri)
        client.search_experiments(max_results=1)
    except MlflowException as error:
        raise unusable(path, f"MLflow's client refuses it too: {error.message.rstrip('.')}") from None
    return client

"""A study's tracking store: its MLflow experiment, its parent run, one nested child run per trial.

`StudyStore.create` is the writer's door (`orchestrator run`: creates the experiment if needed);
`StudyStore.open` the reader's (plan, status, report, ui, `load_results`): it never creates anything and
says clearly when the study has no store or no experiment there. Both find the parent run once.
Only the driver process writes (trials report to Ray Tune, a Tune callback on the driver forwards to
MLflow): an embedded SQLite store then has exactly one writer.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from . import dashboard
from .lookup import StudyNotFound, no_experiment, require_store  # noqa: F401  (their home before lookup.py)
from .params import flatten  # noqa: F401  (its home before params.py)
from .readers import ClientReader, SQLiteReader
from .uri import sqlite_path

ROLE_TAG = "orchestrator.role"
TRIAL_ID_TAG = "orchestrator.trial_id"
TEMPLATE_TAG = "orchestrator.template_id"  # a sampled trial's row before sampling (its search's template)
STUDY_TAG = "orchestrator.study"
PARENT_TAG = "mlflow.parentRunId"
STOPPED_EARLY_TAG = "stopped_early"  # a scheduler (ASHA) ended the trial before its last step
SWEPT_TAG_PREFIX = "swept."  # swept.<dotted key> = the value a trial's row sets (variant override or axis point)


class StudyStore:
    def __init__(self, tracking_uri: str, study_name: str, experiment_id: str, client=None, reader=None):
        """Use `create` or `open`. Reads go through `reader` (readers.py); MLflow's client, which every write
        uses, is made on first use, so that a read-only command on a SQLite store never imports MLflow."""
        self.tracking_uri, self.study_name, self.experiment_id = tracking_uri, study_name, experiment_id
        self._client = client
        self.reader = reader or ClientReader(self.client)
        self.parent_run_id: str | None = self._find_parent()

    @property
    def client(self):
        """MLflow's client (ReachabilityCheckedClient), made on first use."""
        if self._client is None:
            self._client = _client(self.tracking_uri)
        return self._client

    @classmethod
    def create(cls, tracking_uri: str, study_name: str) -> "StudyStore":
        """The study's experiment, created if it does not exist yet (with the SQLite file's folder)."""
        path = sqlite_path(tracking_uri)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
        client = _client(tracking_uri)
        existing = client.get_experiment_by_name(study_name)
        if existing is not None:
            if existing.tags.get(dashboard.EXPERIMENT_KIND_TAG) != dashboard.TRAINING_KIND:
                client.set_experiment_tag(existing.experiment_id, dashboard.EXPERIMENT_KIND_TAG, dashboard.TRAINING_KIND)
            return cls(tracking_uri, study_name, existing.experiment_id, client)
        # Keep a SQLite store's artifacts beside its file rather than in the current directory.
        artifact_location = (path.parent / "artifacts").as_uri() if path is not None else None
        # The machine-learning kind: MLflow's UI then opens the experiment on its runs (tracking/dashboard.py).
        return cls(tracking_uri, study_name, client.create_experiment(
            study_name, artifact_location=artifact_location,
            tags={dashboard.EXPERIMENT_KIND_TAG: dashboard.TRAINING_KIND}), client)

    @classmethod
    def open(cls, tracking_uri: str, study_name: str, chosen: str = "") -> "StudyStore":
        """The study's experiment in an existing store; never creates either. Raises StudyNotFound, whose
        message says how the store was `chosen` (tracking/uri.py's StoreChoice.how). A SQLite store is read
        without MLflow (readers.py)."""
        require_store(tracking_uri, chosen)
        path = sqlite_path(tracking_uri)
        client = None if path is not None else _client(tracking_uri)
        reader = SQLiteReader(path) if path is not None else ClientReader(client)
        existing = reader.experiment(study_name)
        if existing is None:
            raise no_experiment(tracking_uri, study_name, chosen)
        return cls(tracking_uri, study_name, existing[0], client, reader)

    # --- the study's parent run ---------------------------------------------------------------------------
    def _find_parent(self) -> str | None:
        runs = self.reader.runs(self.experiment_id, ROLE_TAG, "study")
        return runs[0].info.run_id if runs else None

    def start_parent(self, tags: dict[str, str]) -> str:
        """Reuse the study's parent run across invocations so that resumed trials nest under it."""
        if self.parent_run_id:
            self.client.update_run(self.parent_run_id, status="RUNNING")
        else:
            run = self.client.create_run(self.experiment_id, run_name=self.study_name,
                                         tags={ROLE_TAG: "study", STUDY_TAG: self.study_name})
            self.parent_run_id = run.info.run_id
        for key, value in tags.items():
            self.client.set_tag(self.parent_run_id, key, value)
        return self.parent_run_id

    def end_parent(self, status: str = "FINISHED") -> None:
        if self.parent_run_id:
            self.client.set_terminated(self.parent_run_id, status=status)

    def refresh_dashboard(self) -> None:
        """(Re)write the experiment tags of the study's MLflow dashboard from the trials' metrics: the
        machine-learning kind and the saved view that `orchestrator ui` opens (tracking/dashboard.py)."""
        runs = [(set(run.data.metrics), run.data.tags) for run in self.trial_runs()]
        now = int(time.time() * 1000)
        for key, value in dashboard.dashboard_tags(dashboard.study_metrics(runs), now).items():
            self.client.set_experiment_tag(self.experiment_id, key, value)

    def log_artifacts(self, folder: Path) -> None:
        if self.parent_run_id:
            self.client.log_artifacts(self.parent_run_id, str(folder))

    # --- reading the trials' runs ---------------------------------------------------------------------------
    def trial_runs(self) -> list:
        """Every trial run of the study (mlflow.entities.Run, or readers.StoredRun: the same fields)."""
        return self.reader.runs(self.experiment_id, ROLE_TAG, "trial")

    def metric_history(self, run_id: str, key: str) -> list:
        """A metric's every logged point (value, step, timestamp)."""
        return self.reader.metric_history(run_id, key)

    def latest_runs(self) -> dict:
        """Each trial identity's most recent run (a trial redone after a failure or a kill has several)."""
        latest: dict = {}
        for run in sorted(self.trial_runs(), key=lambda r: r.info.start_time or 0):
            latest[run.data.tags.get(TRIAL_ID_TAG)] = run
        return latest

    def finished_trial_ids(self) -> set[str]:
        """Trials trained to their end: a run stopped early by a scheduler does not count as done."""
        return {run.data.tags.get(TRIAL_ID_TAG) for run in self.trial_runs()
                if run.info.status == "FINISHED" and run.data.tags.get(STOPPED_EARLY_TAG) != "true"}

    def failed_trial_ids(self) -> set[str]:
        """Trials whose most recent run FAILED (a later FINISHED run of the same trial wins)."""
        return {trial_id for trial_id, run in self.latest_runs().items() if run.info.status == "FAILED"}

    # --- writing the trials' runs ---------------------------------------------------------------------------
    def mark_stale_runs(self, trial_ids: set[str]) -> int:
        """Runs left RUNNING by a killed orchestrator are closed as KILLED; their trials run again."""
        stale = [run for run in self.trial_runs()
                 if run.info.status == "RUNNING" and run.data.tags.get(TRIAL_ID_TAG) in trial_ids]
        for run in stale:
            self.client.set_tag(run.info.run_id, "orchestrator.stale", "true")
            self.client.set_terminated(run.info.run_id, status="KILLED")
        return len(stale)

    def create_trial_run(self, run_name: str, tags: dict[str, str], params: dict[str, Any]) -> str:
        from mlflow.entities import Param

        run = self.client.create_run(self.experiment_id, run_name=run_name,
                                     tags={ROLE_TAG: "trial", STUDY_TAG: self.study_name,
                                           PARENT_TAG: self.parent_run_id, **tags})
        self.client.log_batch(run.info.run_id, params=[Param(k, str(v)) for k, v in params.items()])
        return run.info.run_id

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int, timestamp_ms: int) -> None:
        from mlflow.entities import Metric

        if metrics:
            self.client.log_batch(run_id, metrics=[Metric(k, float(v), timestamp_ms, step) for k, v in metrics.items()])

    def log_series(self, run_id: str, name: str, points: dict[int, float], timestamp_ms: int) -> None:
        """One metric whose step is the x value (e.g. perplexity by evaluation length)."""
        from mlflow.entities import Metric

        self.client.log_batch(run_id, metrics=[Metric(name, float(v), timestamp_ms, int(x)) for x, v in points.items()])

    def log_params(self, run_id: str, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        if params:
            self.client.log_batch(run_id, params=[Param(k, str(v)) for k, v in params.items()])

    def log_inputs(self, run_id: str, datasets: list) -> None:
        """MLflow dataset inputs (mlflow.entities.DatasetInput) of a trial's run."""
        if datasets:
            self.client.log_inputs(run_id, datasets=datasets)

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        from mlflow.entities import RunTag

        self.client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def end_trial_run(self, run_id: str, status: str) -> None:
        self.client.set_terminated(run_id, status=status)

    def log_artifact(self, run_id: str, path: Path, folder: str | None = None) -> None:
        self.client.log_artifact(run_id, str(path), folder)


def _client(tracking_uri: str):
    from mlflow.tracking import MlflowClient

    from .client import ReachabilityCheckedClient

    # With a server, MLflow prints a "View run at" link per finished run, which would interleave with the progress.
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    return ReachabilityCheckedClient(MlflowClient(tracking_uri), tracking_uri)

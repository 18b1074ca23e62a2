"""MLflow bookkeeping: the study's experiment, its parent run, one nested child run per trial.

Only the driver process writes to MLflow (trials report to Ray Tune, and a Tune callback on the driver
forwards to MLflow): an embedded SQLite store then has exactly one writer, so concurrent trials cannot race
on its locks.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import mlflow
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

ROLE_TAG = "orchestrator.role"
TRIAL_ID_TAG = "orchestrator.trial_id"
STUDY_TAG = "orchestrator.study"
PARENT_TAG = "mlflow.parentRunId"
SWEPT_TAG_PREFIX = "swept."  # swept.<dotted key> = the value a trial's row sets (variant override or axis point)


def default_tracking_uri(root: Path | None = None) -> str:
    """The embedded store: SQLite under ./mlruns (MLflow 3 refuses the plain file store)."""
    folder = (root or Path.cwd()) / "mlruns"
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(folder / 'mlflow.db').resolve()}"


def resolve_tracking_uri(flag: str | None) -> str:
    return flag or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri()


def ui_command(tracking_uri: str) -> str:
    if tracking_uri.startswith(("http://", "https://")):
        return f"open {tracking_uri}"
    return f"mlflow ui --backend-store-uri {tracking_uri}"


def flatten(config: dict, prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


class StudyTracker:
    """The study's experiment and parent run in one tracking store."""

    def __init__(self, tracking_uri: str, study_name: str):
        self.tracking_uri = tracking_uri
        self.client = MlflowClient(tracking_uri)
        self.study_name = study_name
        self.experiment_id = self._experiment()
        self.parent_run_id: str | None = None

    def _experiment(self) -> str:
        existing = self.client.get_experiment_by_name(self.study_name)
        if existing is not None:
            return existing.experiment_id
        artifact_location = None
        if self.tracking_uri.startswith("sqlite:///"):
            # Keep artifacts beside the SQLite file rather than in the current directory.
            artifact_location = (Path(self.tracking_uri.removeprefix("sqlite:///")).parent / "artifacts").as_uri()
        return self.client.create_experiment(self.study_name, artifact_location=artifact_location)

    def start_parent(self, tags: dict[str, str]) -> str:
        """Reuse the study's parent run across invocations so that resumed trials nest under it."""
        runs = self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.`{ROLE_TAG}` = 'study'", max_results=1,
            order_by=["attributes.start_time DESC"],
        )
        if runs:
            self.parent_run_id = runs[0].info.run_id
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

    def trial_runs(self) -> list[mlflow.entities.Run]:
        return self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.`{ROLE_TAG}` = 'trial'", max_results=10000,
        )

    def finished_trial_ids(self) -> set[str]:
        return {run.data.tags.get(TRIAL_ID_TAG) for run in self.trial_runs() if run.info.status == "FINISHED"}

    def mark_stale_runs(self, trial_ids: set[str]) -> int:
        """Runs left RUNNING by a killed orchestrator are closed as KILLED; their trials run again."""
        stale = [run for run in self.trial_runs()
                 if run.info.status == "RUNNING" and run.data.tags.get(TRIAL_ID_TAG) in trial_ids]
        for run in stale:
            self.client.set_tag(run.info.run_id, "orchestrator.stale", "true")
            self.client.set_terminated(run.info.run_id, status="KILLED")
        return len(stale)

    def create_trial_run(self, run_name: str, tags: dict[str, str], params: dict[str, Any]) -> str:
        run = self.client.create_run(self.experiment_id, run_name=run_name,
                                     tags={ROLE_TAG: "trial", STUDY_TAG: self.study_name,
                                           PARENT_TAG: self.parent_run_id, **tags})
        self.client.log_batch(run.info.run_id, params=[Param(k, str(v)) for k, v in params.items()])
        return run.info.run_id

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int, timestamp_ms: int) -> None:
        if metrics:
            self.client.log_batch(run_id, metrics=[Metric(k, float(v), timestamp_ms, step) for k, v in metrics.items()])

    def log_series(self, run_id: str, name: str, points: dict[int, float], timestamp_ms: int) -> None:
        """One metric whose step is the x value (e.g. perplexity by evaluation length)."""
        self.client.log_batch(run_id, metrics=[Metric(name, float(v), timestamp_ms, int(x)) for x, v in points.items()])

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        self.client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def end_trial_run(self, run_id: str, status: str) -> None:
        self.client.set_terminated(run_id, status=status)

    def log_artifacts(self, folder: Path) -> None:
        if self.parent_run_id:
            self.client.log_artifacts(self.parent_run_id, str(folder))

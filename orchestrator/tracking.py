"""MLflow bookkeeping: the study's experiment, its parent run, one nested child run per trial.

Only the driver process writes to MLflow (trials report to Ray Tune, and a Tune callback on the driver
forwards to MLflow): an embedded SQLite store then has exactly one writer, so concurrent trials cannot race
on its locks.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any

import mlflow
import requests
from mlflow.entities import Metric, Param, RunTag
from mlflow.environment_variables import MLFLOW_HTTP_REQUEST_MAX_RETRIES, MLFLOW_HTTP_REQUEST_TIMEOUT
from mlflow.tracking import MlflowClient

from .errors import TrackingServerUnreachable, exception_chain

ROLE_TAG = "orchestrator.role"
TRIAL_ID_TAG = "orchestrator.trial_id"
STUDY_TAG = "orchestrator.study"
PARENT_TAG = "mlflow.parentRunId"
STOPPED_EARLY_TAG = "stopped_early"  # a scheduler (ASHA) ended the trial before its last step
SWEPT_TAG_PREFIX = "swept."  # swept.<dotted key> = the value a trial's row sets (variant override or axis point)


def default_tracking_uri(root: Path | None = None) -> str:
    """The embedded store: SQLite under ./mlruns (MLflow 3 refuses the plain file store)."""
    folder = (root or Path.cwd()) / "mlruns"
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

    def __init__(self, tracking_uri: str, study_name: str, create: bool = True):
        self.tracking_uri = tracking_uri
        self.study_name = study_name
        # With a server, MLflow prints a "View run at" link per finished run, which would interleave with the progress.
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
        if create:
            if tracking_uri.startswith("sqlite:///"):
                Path(tracking_uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
            self.client = ReachabilityCheckedClient(MlflowClient(tracking_uri), tracking_uri)
            self.experiment_id = self._experiment()
        else:  # read-only use (plan, status, report): a study never run has no experiment yet
            self.client = ReachabilityCheckedClient(MlflowClient(tracking_uri), tracking_uri)
            existing = self.client.get_experiment_by_name(study_name)
            self.experiment_id = existing.experiment_id if existing else None
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
        if self.experiment_id is None:
            return []
        return self.client.search_runs(
            [self.experiment_id], filter_string=f"tags.`{ROLE_TAG}` = 'trial'", max_results=10000,
        )

    def finished_trial_ids(self) -> set[str]:
        """Trials trained to their end: a run stopped early by a scheduler does not count as done."""
        return {run.data.tags.get(TRIAL_ID_TAG) for run in self.trial_runs()
                if run.info.status == "FINISHED" and run.data.tags.get(STOPPED_EARLY_TAG) != "true"}

    def failed_trial_ids(self) -> set[str]:
        """Trials whose most recent run FAILED (a later FINISHED run of the same trial wins)."""
        latest: dict[str, object] = {}
        for run in sorted(self.trial_runs(), key=lambda r: r.info.start_time or 0):
            latest[run.data.tags.get(TRIAL_ID_TAG)] = run.info.status
        return {trial_id for trial_id, status in latest.items() if status == "FAILED"}

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

    def log_artifact(self, run_id: str, path: Path, folder: str | None = None) -> None:
        self.client.log_artifact(run_id, str(path), folder)

    def log_artifacts(self, folder: Path) -> None:
        if self.parent_run_id:
            self.client.log_artifacts(self.parent_run_id, str(folder))


class ReachabilityCheckedClient:
    """An MlflowClient whose calls raise TrackingServerUnreachable, a one-paragraph explanation, when the
    tracking server cannot be reached (after the MLflow client's own retries) instead of a deep HTTP error."""

    def __init__(self, client: MlflowClient, tracking_uri: str):
        self._client = client
        self._tracking_uri = tracking_uri

    def __getattr__(self, name: str):
        attribute = getattr(self._client, name)
        if not callable(attribute):
            return attribute

        @functools.wraps(attribute)
        def checked(*args, **kwargs):
            try:
                return attribute(*args, **kwargs)
            except Exception as error:
                reason = connection_failure(error)
                if reason is None:
                    raise
                raise TrackingServerUnreachable(unreachable_message(self._tracking_uri, reason)) from error

        return checked


def connection_failure(error: BaseException) -> str | None:
    """A short reason ("[Errno 111] Connection refused") when an HTTP request never got an answer, else None."""
    for cause in exception_chain(error):
        if isinstance(cause, (requests.exceptions.ConnectionError, requests.exceptions.Timeout,
                              requests.exceptions.RetryError)):
            text = str(cause)
            found = re.search(r"\[Errno -?\d+\] [^'\")\]]+|Read timed out|too many \d+ error responses", text)
            return found.group(0).strip() if found else type(cause).__name__
    return None


def unreachable_message(tracking_uri: str, reason: str) -> str:
    return (f"MLflow tracking server at {tracking_uri} is unreachable ({reason}). Trials that finished before are "
            "safe in its store. When the server is back, run the same command again: finished trials are skipped "
            "and the others run again. (The MLflow client gives up after "
            f"MLFLOW_HTTP_REQUEST_MAX_RETRIES={MLFLOW_HTTP_REQUEST_MAX_RETRIES.get()} retries of up to "
            f"MLFLOW_HTTP_REQUEST_TIMEOUT={MLFLOW_HTTP_REQUEST_TIMEOUT.get()}s each; raise them to ride out longer "
            "outages.)")

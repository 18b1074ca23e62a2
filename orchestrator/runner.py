"""Run a validated study: skip finished trials, run the rest as Ray Tune trials, log to MLflow, report."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import ray
from ray import tune
from ray.exceptions import AuthenticationError

from .errors import RayClusterUnreachable, TrackingServerUnreachable, exception_chain
from .mlflow_callback import MlflowTrialLogger
from .progress import Progress
from .report import write_report
from .study import Study
from .tracking import StudyTracker
from .trainable import run_trial
from .trials import Trial, expand


@dataclass
class StudyOutcome:
    trials: list[Trial]
    skipped: list[Trial]
    failed: dict[str, str] = field(default_factory=dict)
    report_dir: Path | None = None
    report_markdown: str = ""
    wall_seconds: float = 0.0
    train_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failed


def _code_version() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, timeout=5).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _start_ray(address: str | None) -> None:
    if ray.is_initialized():
        return
    # Ray's own log lines would drown the progress; errors still surface through the trial results.
    common = dict(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        try:
            ray.init(address=address, **common)
        except (ConnectionError, AuthenticationError) as error:
            raise RayClusterUnreachable(_ray_unreachable_message(address, error)) from error
    else:
        # "local" starts a private Ray even when a `ray start` cluster is running on this machine.
        ray.init(address="local", num_cpus=os.cpu_count(), **common)


def _ray_unreachable_message(address: str, error: Exception) -> str:
    # Ray's own errors are screens of traceback. A token mismatch is the usual case on a real cluster: Ray
    # enables token authentication by default, and an explicit address never turns it on in the driver.
    text = "\n".join(str(cause) for cause in exception_chain(error))
    if re.search(r"InvalidAuthToken|authentication token|AuthenticationError", text, re.IGNORECASE):
        return (f"The Ray cluster at {address} did not accept this driver's authentication. Give the driver the "
                "cluster's setting: RAY_AUTH_MODE=token and the cluster's token in RAY_AUTH_TOKEN (or in a file "
                f"named by RAY_AUTH_TOKEN_PATH); here RAY_AUTH_MODE is {os.environ.get('RAY_AUTH_MODE', 'unset')}. "
                "No trial was run.")
    return (f"Cannot connect to the Ray cluster at {address}. Check the address (HOST:PORT of the head's GCS, "
            "ray://HOST:10001 for Ray Client, or auto on a cluster node) and that the head is up. No trial was run.")


def run_study(study: Study, tracking_uri: str, address: str | None = None, reports_dir: Path = Path("reports"),
              storage_dir: Path = Path(".orchestrator"), progress: Progress | None = None) -> StudyOutcome:
    started = time.monotonic()
    trials = expand(study)
    progress = progress or Progress(len(trials))
    tracker = StudyTracker(tracking_uri, study.name)
    code_version = _code_version()
    tracker.start_parent({"description": study.description[:4000], "code_version": code_version,
                          "trials": str(len(trials))})
    done = tracker.finished_trial_ids()
    todo = [trial for trial in trials if trial.trial_id not in done]
    skipped = [trial for trial in trials if trial.trial_id in done]
    tracker.mark_stale_runs({trial.trial_id for trial in todo})
    progress.total = len(todo)
    if skipped:
        progress.message(f"{len(skipped)} trial(s) already finished in the tracking store: not rerun")
    outcome = StudyOutcome(trials=trials, skipped=skipped)
    status = "FINISHED"
    try:
        if todo:
            logger = MlflowTrialLogger(tracker, todo, progress, {"code_version": code_version})
            _start_ray(address)
            progress.message(f"Running {len(todo)} trial(s) on Ray ({ray.cluster_resources().get('CPU', 0):.0f} CPUs)")
            _fit(study, todo, logger, storage_dir)
            outcome.failed = dict(logger.failed)
            outcome.train_seconds = sum(logger.train_seconds.values())
            missing = [t for t in todo if t.trial_id not in logger.finished and t.trial_id not in logger.failed]
            for trial in missing:
                outcome.failed[trial.trial_id] = "trial did not finish"
        if outcome.failed:
            status = "FAILED"
    except BaseException as error:
        status = "KILLED"
        unreachable = next((e for e in exception_chain(error) if isinstance(e, TrackingServerUnreachable)), None)
        if unreachable is not None:
            status = None  # nothing more can be written; the next run reuses the parent run
            raise unreachable from unreachable.__cause__  # without Ray Tune's wrapping of the callback's error
        raise
    finally:
        if status:
            tracker.end_parent(status)
    outcome.report_dir, outcome.report_markdown = write_report(study, tracker, reports_dir)
    outcome.wall_seconds = time.monotonic() - started
    return outcome


def _fit(study: Study, trials: list[Trial], logger: MlflowTrialLogger, storage_dir: Path) -> None:
    # Tune's own console output (experiment banner, tables) would interleave with ours: use the legacy
    # reporter, which verbose=0 silences entirely.
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    resources = {"cpu": study.resources.cpus, "gpu": study.resources.gpus}
    tuner = tune.Tuner(
        tune.with_resources(run_trial, resources),
        param_space={"trial": tune.grid_search([trial.payload() for trial in trials])},
        tune_config=tune.TuneConfig(
            max_concurrent_trials=study.resources.max_concurrent,
            trial_name_creator=lambda t: t.config["trial"]["trial_id"],
            trial_dirname_creator=lambda t: t.config["trial"]["trial_id"],
        ),
        run_config=tune.RunConfig(
            name=study.name,
            storage_path=str(storage_dir.resolve() / "ray_results"),
            verbose=0,
            callbacks=[logger],
            failure_config=tune.FailureConfig(max_failures=study.resources.max_retries),
        ),
    )
    tuner.fit()

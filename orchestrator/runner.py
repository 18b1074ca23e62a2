"""Run a validated study: skip finished trials, run the rest (Ray Tune, or in-process with `local`), log to
MLflow through the driver's recorder, and write the report."""

from __future__ import annotations

import logging
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from .errors import TrackingServerUnreachable, exception_chain
from .progress import Progress
from .recorder import TrialRecorder
from .report import write_report
from .study import Study
from .tracking import StudyTracker
from .trials import Trial, expand


@dataclass
class StudyOutcome:
    trials: list[Trial]
    skipped: list[Trial]
    failed: dict[str, str] = field(default_factory=dict)
    report_dir: Path | None = None
    report_markdown: str = ""
    wall_seconds: float = 0.0
    trial_seconds: float = 0.0  # the trials' own training and evaluation time, summed
    concurrency: int = 1
    steps_run: int = 0
    trials_run: int = 0

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def overhead(self) -> float | None:
        """Share of the wall time the trial slots were not training or evaluating:
        1 − (Σ trial work / concurrency) / wall time. It includes start-up, bookkeeping and slots left idle
        when the trials do not divide evenly among them."""
        if not self.trial_seconds or not self.wall_seconds:
            return None
        return 1.0 - (self.trial_seconds / self.concurrency) / self.wall_seconds


def code_version() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, timeout=5).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def select_trials(study: Study, tracker: StudyTracker, failed_only: bool = False) -> tuple[list[Trial], list[Trial]]:
    """(to run, already finished). With `failed_only`, only trials whose latest run FAILED are run."""
    trials = expand(study)
    if study.search.algorithm != "grid":
        return trials, []  # sampled trials have no identity before Tune samples them
    done = tracker.finished_trial_ids()
    todo = [t for t in trials if t.trial_id not in done]
    if failed_only:
        failed = tracker.failed_trial_ids()
        todo = [t for t in todo if t.trial_id in failed]
    return todo, [t for t in trials if t.trial_id in done]


def run_study(study: Study, tracking_uri: str, address: str | None = None, reports_dir: Path = Path("reports"),
              storage_dir: Path = Path(".orchestrator"), progress: Progress | None = None, local: bool = False,
              failed_only: bool = False) -> StudyOutcome:
    started = time.monotonic()
    tracker = StudyTracker(tracking_uri, study.name)
    todo, skipped = select_trials(study, tracker, failed_only)
    progress = progress or Progress(len(todo))
    progress.total = len(todo) if study.search.algorithm == "grid" else study.search.num_samples * len(todo)
    version = code_version()
    tracker.start_parent({"description": study.description[:4000], "code_version": version,
                          "trials": str(len(todo) + len(skipped))})
    tracker.mark_stale_runs({trial.trial_id for trial in todo})
    if skipped:
        progress.message(f"{len(skipped)} trial(s) already finished in the tracking store: not rerun")
    outcome = StudyOutcome(trials=todo + skipped, skipped=skipped)
    recorder = TrialRecorder(tracker, progress, {"code_version": version, "study": study.name})
    status = "FINISHED"
    try:
        if todo:
            with progress:
                if local:
                    _run_local(todo, recorder, study, storage_dir)
                    outcome.concurrency = 1
                else:
                    from .tune_runner import run_with_tune

                    outcome.concurrency = run_with_tune(study, todo, recorder, storage_dir, address, progress)
        outcome.failed = dict(recorder.failed)
        outcome.trial_seconds = sum(recorder.train_seconds.values())
        outcome.steps_run = sum(recorder.steps_run.values())
        outcome.trials_run = len(recorder.run_ids)
        if study.search.algorithm == "grid":
            for trial in todo:
                if trial.trial_id not in recorder.finished and trial.trial_id not in recorder.failed:
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
            try:
                tracker.end_parent(status)
            except Exception:  # the store may be the thing that failed; the original error matters more
                logging.getLogger(__name__).debug("could not close the parent run", exc_info=True)
    outcome.report_dir, outcome.report_markdown = write_report(study, tracker, reports_dir)
    outcome.wall_seconds = time.monotonic() - started
    return outcome


def _run_local(trials: list[Trial], recorder: TrialRecorder, study: Study, storage_dir: Path) -> None:
    """Trials one by one in this process, without Ray: for stepping through a trial with a debugger."""
    from .trainable import execute

    threads = max(1, int(study.resources.cpus))
    for trial in trials:
        recorder.start(trial)
        try:
            tune_config = {"trial": trial.payload(), "checkpoint_root": str(storage_dir.resolve() / "checkpoints")}
            execute(tune_config, lambda result, t=trial: recorder.result(t, result), threads)
        except Exception as error:  # a failing trial is recorded; the study goes on
            recorder.error(trial, f"{type(error).__name__}: {error}")
            continue
        recorder.complete(trial)

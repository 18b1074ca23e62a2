"""`orchestrator run`'s work, above both halves it joins: run the study's unfinished trials (execution/), each
scoring the lengths of the study's `report.lengths` itself after its own evaluation (which ones: evaluation/
in_trial.py), then score those its finished trials still lack (evaluation/: trials of a store written before, or
that could not score them), then write its report from the store (reporting/), all from one expansion of the study
(the run context's rows). None of the halves imports another; the command line and the tests that run a study
call this."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from .evaluation.in_trial import later_lengths_by_trial
from .evaluation.request import EvalRequest
from .evaluation.runner import EvaluationRefused, evaluate_study
from .execution.runner import StudyOutcome, run_study
from .reporting.build import build_report
from .run_context import RunContext


def start_ray_early(tracking_uri: str, address: str | None, local: bool) -> None:
    """Where the run will certainly train on the private local Ray (a new SQLite store, whose trials are all to
    run; no --local, no --address), Ray starts now in the background (execution/cluster.py `start_local_early`),
    so that it comes up while the caller creates the store (both take seconds); `run_study` waits for it.
    Anywhere else Ray starts as before, once the trials to run are known (none: no Ray at all)."""
    from .tracking.uri import sqlite_path

    path = sqlite_path(tracking_uri)
    if local or address or path is None or path.exists():
        return
    from .execution.cluster import start_local_early

    start_local_early()


def run_and_report(context: RunContext, reports_dir: Path = Path("reports"),
                   say: Callable[[str], None] = print) -> StudyOutcome:
    """Run the study (`run_trials`), evaluate the `report.lengths` its trials still lack (`evaluate_later`), then
    build its report into `reports_dir` and attach it to the study's parent run. The outcome's wall time covers all
    three, from the context's start."""
    outcome = run_trials(context)
    evaluate_later(context, outcome, reports_dir, say)
    report = build_report(context, reports_dir)
    outcome.report_dir, outcome.claims = report.folder, report.claims
    outcome.report_summary = report.summary
    outcome.wall_seconds = time.monotonic() - context.started
    return outcome


def run_trials(context: RunContext) -> StudyOutcome:
    """Run the study's unfinished trials (execution/runner.py), each scoring the study's `report.lengths` it
    would lack itself, once its own lengths are scored (evaluation/in_trial.py): that evaluation runs while the
    other trials train, and the trial order counts its cost (planning/schedule.py)."""
    return run_study(context, later_lengths=later_lengths_by_trial(context))


def evaluate_later(context: RunContext, outcome: StudyOutcome, reports_dir: Path,
                   say: Callable[[str], None] = print) -> None:
    """The main job ends judged: the lengths of the study's `report.lengths` that its finished trials lack (none
    where its trials scored them themselves, `run_trials`: those of a store written before, or a trial whose
    own attempt failed) are
    scored from their kept models as `orchestrator evaluate STUDY` scores them, on the Ray the trials ran on
    (one task per trial, reserving the study's resources) or in this process with `local`. Resumable like it:
    a length a trial has is never scored again, so a second run adds nothing. A trial whose evaluation failed
    is counted with the failed trials (its training stays recorded); lengths too long for the device's memory
    are a note, and the claims that need them stay inconclusive saying so."""
    study = context.study
    if not study.report.lengths:
        return
    try:  # in the store the run created (the context's): not opened again
        evaluated = evaluate_study(context, EvalRequest(), reports_dir=reports_dir, say=say, report=False)
    except EvaluationRefused as error:
        say(f"note: report.lengths not evaluated: {error}")
        return
    if evaluated.evaluated:
        say(f"report.lengths: {len(evaluated.evaluated)} trial(s) evaluated in {evaluated.wall_seconds:.0f}s wall "
            f"({evaluated.task_seconds:.0f}s of evaluation)")
    for name, reason in evaluated.failed.items():
        outcome.failed[f"{name} (evaluation at report.lengths)"] = reason

"""`orchestrator run`'s work, above both halves it joins: run the study's unfinished trials (execution/), then
write its report from the store (reporting/), both from one expansion of the study (the run context's rows).
Neither half imports the other; cli.py and the tests that run a study call this."""

from __future__ import annotations

import time
from pathlib import Path

from .execution.context import RunContext
from .execution.runner import StudyOutcome, run_study
from .reporting.build import build_report
from .reporting.render_md import summary


def run_and_report(context: RunContext, reports_dir: Path = Path("reports")) -> StudyOutcome:
    """Run the study (execution/runner.py), then build its report into `reports_dir` and attach it to the
    study's parent run. The outcome's wall time covers both, from the context's start."""
    outcome = run_study(context)
    report = build_report(context.study, context.store, reports_dir, study_path=context.study_path,
                          trials=context.rows)
    outcome.report_dir, outcome.claims = report.folder, report.claims
    outcome.report_summary = summary(report.document)
    outcome.wall_seconds = time.monotonic() - context.started
    return outcome

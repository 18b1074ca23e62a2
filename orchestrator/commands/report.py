"""`orchestrator report`: the study's report built from the tracking store (orchestrator/reporting/)."""

from __future__ import annotations

from pathlib import Path

from .claims import claims_line, exit_on_failed_claims
from .invocation import Invocation
from .output import EXIT_INVALID, browse_hint, console, stop


def report(invocation: Invocation, *, reports_dir: Path | None, value: str, full: bool, attach: bool,
           strict_claims: bool, new_sequence: bool = False) -> None:
    try:
        from ..reporting.results import ValueChoice

        choice = ValueChoice.parse(value)
    except ValueError as error:
        stop(f"[red]Invalid option[/red] --{error}", EXIT_INVALID)
    from ..reporting import build_report
    from ..run_context import RunContext

    reports_dir = invocation.writable_reports(reports_dir)
    store = invocation.stored_or_exit("No results")  # opened once: the report reads it through the context
    from ..judging.design import report_check

    # the design lock (judging/design.py): another decide: section or other seeds than the recorded sequence's
    # are refused (exit 2), or with --new-sequence judged as a new sequence that the report states
    note = report_check(store, invocation.study, new_sequence, attach)
    built = build_report(RunContext.of(invocation.study, store, study_path=invocation.study_path), reports_dir,
                         choice, attach, rebuild=bool(note), note=note)
    if note:
        console.print(note, markup=False)
    console.print(built.markdown if full else built.summary, markup=False)
    attached = "; attached to the study's parent run in MLflow" if attach and store.parent_run_id else ""
    console.print(f"Report: {built.folder / 'report.html'} (also report.md, tables.tex, CSV, plots/){attached}")
    console.print(browse_hint(invocation.study_path, invocation.tracking_flag))
    claims_line(built.claims, int((built.trials["status"] == "FINISHED").sum()))
    exit_on_failed_claims(built.claims, strict_claims)


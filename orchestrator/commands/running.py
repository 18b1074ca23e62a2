"""`orchestrator run`: run every unfinished trial of a study, then write its report (orchestrator/run.py), and
say in one paragraph, never a traceback, why a run stopped. `run` checks the options (`_checked`), runs the study
(`_run_study`) and says how it went (`_say_outcome`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from ..decide_loop import decide_and_report, with_decide
from ..errors import OrchestratorError, exception_chain
from ..execution import interrupt
from ..execution.local import multi_worker_problem
from ..execution.runner import StudyOutcome
from ..library_logs import library_logs_to
from ..run import run_and_report, start_ray_early
from ..run_context import RunContext
from ..study import Study
from ..tracking.code_check import StalePolicy
from ..tracking.uri import ui_command
from ..trial.trials import Trial, expand
from .claims import claims_line, exit_on_failed_claims
from .invocation import Invocation
from .output import (
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_TRIALS_FAILED,
    browse_hint,
    console,
    first_line,
    stop,
)


def on_cluster(address: str | None) -> bool:
    """On a cluster (--address, RAY_ADDRESS) the driver's disk may not be the workers': each trial checks its data."""
    return bool(address or os.environ.get("RAY_ADDRESS"))


@dataclass(frozen=True)
class RunOptions:
    """`orchestrator run`'s options (cli.py), by their parameter names there."""

    address: str | None
    reports_dir: Path | None
    storage_dir: Path | None
    local: bool
    connect_timeout: float
    resource_wait: float
    failed_only: bool
    debug: bool
    strict_claims: bool
    decide: bool = False  # --decide, or a study's `decide:` section: seeds added until its claims are decided
    new_sequence: bool = False
    retrain_stale: bool = False
    keep_stale: bool = False


def run(invocation: Invocation, **options: Any) -> None:
    """`orchestrator run` with cli.py's options (RunOptions); `decide` (--decide), or a study's `decide:` section:
    seeds added until its claims are decided (orchestrator/decide_loop.py)."""
    chosen = RunOptions(**options)
    study, deciding, stale = _checked(invocation, chosen)  # refused: exit 2, nothing run
    rows = expand(study)  # once: the run and its report read these
    if chosen.local:
        _exit_if_not_local(rows)
    outcome = _run_study(invocation, chosen, study, deciding is not None, stale, rows)
    _say_outcome(invocation, outcome, chosen.strict_claims)


def _checked(invocation: Invocation, options: RunOptions) -> tuple[Study, Study | None, StalePolicy]:
    """The study as it runs (its decide sequence's, where one decides), that sequence's study or None, and what
    becomes of finished trials of other code; an option that does not go with the others: exit 2, nothing run."""
    deciding = with_decide(invocation.study, options.decide)  # the sequence's study, or None; refused: exit 2
    if deciding is not None and options.failed_only:
        stop("[red]Invalid option[/red] --failed-only: a run that adds seeds until its claims are decided reruns "
             "its failed trials anyway (run it again without --failed-only). Nothing was run.", EXIT_INVALID)
    if deciding is None and options.new_sequence:
        stop("[red]Invalid option[/red] --new-sequence: it starts a new sequence of looks of --decide (or of the "
             "study's decide: section); give --decide too. Nothing was run.", EXIT_INVALID)
    if options.retrain_stale and options.keep_stale:
        stop("[red]Invalid options[/red] --retrain-stale and --keep-stale: the finished trials of other code are "
             "either trained again or kept, not both. Nothing was run.", EXIT_INVALID)
    stale = (StalePolicy.RETRAIN if options.retrain_stale else StalePolicy.KEEP if options.keep_stale
             else StalePolicy.REFUSE)
    return deciding or invocation.study, deciding, stale


def _run_study(invocation: Invocation, options: RunOptions, study: Study, deciding: bool, stale: StalePolicy,
               rows: list[Trial]) -> StudyOutcome:
    """Run the study's trials (by looks, where `deciding`) and write its report; why it stopped, in one
    paragraph with its exit code."""
    uri, study_path, profile = invocation.uri, invocation.study_path, invocation.profile
    reports_dir = invocation.writable_reports(options.reports_dir)
    storage_dir = invocation.writable_folder(options.storage_dir, ".orchestrator", "--storage-dir")
    console.print(f"Study [bold]{study.name}[/bold] from {study_path}{f' (profile {profile})' if profile else ''}; "
                  f"tracking at {uri}")
    log_file = storage_dir / "logs" / f"{study.name}.log"  # MLflow's and Ray's messages, not the console's
    try:
        # Ctrl-C and SIGTERM stop it cleanly (130, 143), Ray's handlers or not.
        with library_logs_to(log_file), interrupt.stop_signals():
            start_ray_early(uri, options.address, options.local)  # a new store: Ray comes up while it is created
            context = RunContext.create(study, uri, options.connect_timeout, rows=rows, storage_dir=storage_dir,
                                        address=options.address, local=options.local,
                                        failed_only=options.failed_only, resource_wait=options.resource_wait,
                                        study_path=study_path, stale=stale)
            say = lambda line: console.print(line, markup=False)  # noqa: E731
            if deciding:  # seeds added until the claims are decided (decide_loop.py)
                return decide_and_report(context, reports_dir, say=say, new_sequence=options.new_sequence)
            return run_and_report(context, reports_dir, say=say)
    except OrchestratorError:
        raise  # reported by main() as one paragraph with its exit code
    except KeyboardInterrupt:
        stop(f"Interrupted by {interrupt.cause()}. Finished trials are safe in the tracking store; run the same "
             "command to resume.", interrupt.exit_code())
    except Exception as error:  # one paragraph, not a traceback: what failed, and that the study can resume
        if options.debug:
            raise
        refused = _refused_value(error)
        if refused:  # the user's input, not an outage: re-running would fail the same way
            stop(f"[red]The tracking store refused a value of this study[/red]: {escape(refused)}. Change it in "
                 "the study file (or its overrides) and run again. Add --debug for the traceback.", EXIT_INVALID)
        stop(f"[red]The study stopped[/red]: {type(error).__name__}: {first_line(error)}. "
             f"Trials that finished are recorded in {uri}; once the cause is fixed, run the same command "
             "to resume without repeating them. Add --debug for the traceback (the libraries' messages are "
             f"in {escape(str(log_file))}).", EXIT_INTERRUPTED)


def _say_outcome(invocation: Invocation, outcome: StudyOutcome, strict_claims: bool) -> None:
    """The report's summary, where it is, the counts and the claims; exit 3 where a trial failed, 4 where a claim
    failed under --strict-claims."""
    assert outcome.report_dir is not None, "run_and_report and decide_and_report write the report (run.py)"
    console.print()
    console.print(outcome.report_summary, markup=False)
    console.print(f"Report: {outcome.report_dir / 'report.html'} (also report.md, tables.tex, CSV, plots/; attached "
                  "to the study's parent run in MLflow)")
    console.print(f"{browse_hint(invocation.study_path, invocation.tracking_flag)}  (or: {ui_command(invocation.uri)})")
    overhead = f"; orchestration overhead {outcome.overhead:.1%}" if outcome.overhead is not None else ""
    if outcome.overhead_inconsistent:  # never a negative share: say why there is none
        overhead = ("; orchestration overhead not measured (resumed trials count their training before the "
                    "restart, more than this run's wall time)")
    console.print(f"Wall time {outcome.wall_seconds:.0f}s; {len(outcome.skipped)} trial(s) reused, "
                  f"{outcome.trials_run} run, {len(outcome.failed)} failed; "
                  f"{outcome.steps_run} training steps{overhead}")
    claims_line(outcome.claims, len(outcome.trials) - len(outcome.failed))
    if outcome.failed:
        raise typer.Exit(EXIT_TRIALS_FAILED)
    exit_on_failed_claims(outcome.claims, strict_claims)


def _exit_if_not_local(rows: list) -> None:
    problem = multi_worker_problem(rows)
    if problem:
        stop(f"[red]Invalid argument[/red]: {problem}. Nothing was run.", EXIT_INVALID)


def _refused_value(error: BaseException) -> str | None:
    """MLflow's message where it rejected a value the study gave (a name or a param too long, ...)."""
    from mlflow.exceptions import MlflowException

    for cause in exception_chain(error):
        if isinstance(cause, MlflowException) and cause.error_code == "INVALID_PARAMETER_VALUE":
            return first_line(cause)
    return None

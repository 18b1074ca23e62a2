"""`orchestrator evaluate`: the study's finished trials scored again from their kept models, or timed alone
(orchestrator/evaluation/)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from ..errors import OrchestratorError
from .claims import claims_line
from .invocation import Invocation
from .output import (
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_TRIALS_FAILED,
    TRACKING_FLAG,
    console,
    err,
    first_line,
    stop,
)


def evaluation_lengths(given: str | None, rest: list[str]) -> tuple[list[int], list[str]]:
    """(lengths, overrides): `--lengths 16384 32768`: the option takes the first, the numbers after it arrive as
    positional arguments, among the overrides. Exit 2 where a length is not a positive token count."""
    if given is None:
        return [], rest
    words = given.replace(",", " ").split() + [word for word in rest if word.isdigit()]
    overrides = [word for word in rest if not word.isdigit()]
    try:
        values = [int(word) for word in words]
    except ValueError:
        values = []
    if not values or any(value <= 0 for value in values):
        stop(f"[red]Invalid option[/red] --lengths {escape(given)}: give positive token counts, e.g. "
             "--lengths 1024 2048. Nothing was evaluated.", EXIT_INVALID)
    return sorted(set(values)), overrides


def verify(invocation: Invocation) -> None:
    """`evaluate --verify`: every kept model file of the study's trials checked against the SHA-256 its run
    recorded at save; reads only. Exit 1 where a file changed or is missing, naming the trial and the file."""
    from ..evaluation.verify import verify_study

    console.print(f"Study [bold]{invocation.study.name}[/bold] from {invocation.study_path}; tracking at "
                  f"{invocation.uri}")
    try:
        store = invocation.stored_or_exit("Nothing to verify:")
        outcome = verify_study(store, say=lambda line: console.print(line, markup=False))
    except OrchestratorError as error:  # a damaged or locked store, an unreachable server
        stop(f"[red]{error.title}[/red] {escape(str(error))}", error.exit_code)
    console.print(f"{len(outcome.ok)} trial(s) with every kept file as saved, {len(outcome.changed)} changed, "
                  f"{len(outcome.unchecked)} recorded before checksums were kept (not checked)")
    for name, reason in outcome.changed.items():
        err.print(f"[red]{escape(name)}[/red]: {escape(reason)}")
    if outcome.changed:
        raise typer.Exit(EXIT_TRIALS_FAILED)


def evaluate(invocation: Invocation, lengths: list[int], *, tail_tokens: int | None, windows: int | None,
             visualise: bool, time_it: bool, repeats: int, again: bool, address: str | None,
             reports_dir: Path | None, local: bool, debug: bool) -> None:
    from ..evaluation.request import EvalRequest
    from ..evaluation.runner import evaluate_study
    from ..run_context import RunContext
    from ..tracking.lookup import StudyNotFound

    study, study_path = invocation.study, invocation.study_path
    reports_dir = invocation.writable_reports(reports_dir)
    uri = invocation.uri
    request = EvalRequest(lengths=tuple(lengths), tail_tokens=tail_tokens, n_windows=windows,
                          visualise=visualise, time=time_it, time_repeats=repeats, again=again)
    console.print(f"Study [bold]{study.name}[/bold] from {study_path}; tracking at {uri}")
    from ..execution import interrupt
    from ..library_logs import library_logs_to

    log_file = invocation.folder(None, ".orchestrator") / "logs" / f"{study.name}.log"
    try:
        with library_logs_to(log_file), interrupt.stop_signals():  # Ctrl-C and SIGTERM stop it cleanly (130, 143)
            # the store opened once, carried through the evaluation and the report
            context = RunContext.open(study, uri, local=local, address=address, study_path=study_path)
            outcome = evaluate_study(context, request, reports_dir=reports_dir,
                                     say=lambda line: console.print(line, markup=False))
    except StudyNotFound as error:
        stop(f"[red]Nothing to evaluate[/red]: {escape(error.describe(TRACKING_FLAG))}", EXIT_INVALID)
    except OrchestratorError as error:  # refused lengths (2), Ctrl-C (130), an unreachable service (3)
        stop(f"[red]{error.title}[/red] {escape(str(error))}", error.exit_code)
    except KeyboardInterrupt:
        stop(f"Interrupted by {interrupt.cause()}. Evaluated trials are in the tracking store; run the same command "
             "for the rest.", interrupt.exit_code())
    except Exception as error:
        if debug:
            raise
        stop(f"[red]The evaluation stopped[/red]: {type(error).__name__}: {first_line(error)}. "
             "Run the same command to evaluate what is missing. Add --debug for the traceback (the libraries' "
             f"messages are in {escape(str(log_file))}).", EXIT_INTERRUPTED)
    if outcome.report_summary:
        assert outcome.report_dir is not None, "the report's folder comes with its summary (evaluation/runner.py)"
        console.print()
        console.print(outcome.report_summary, markup=False)
        console.print(f"Report: {outcome.report_dir / 'report.html'}")
    console.print(f"Wall time {outcome.wall_seconds:.1f}s; {len(outcome.evaluated)} trial(s) evaluated "
                  f"({outcome.task_seconds:.1f}s of evaluation), {len(outcome.skipped)} already done, "
                  f"{len(outcome.without_weights)} without weights, {outcome.not_finished} not finished, "
                  f"{len(outcome.failed)} failed")
    for name, reason in outcome.failed.items():
        err.print(f"[red]{escape(name)}[/red]: {escape(reason)}")
    claims_line(outcome.claims)  # the verdicts it was run to settle, as `run` prints them
    if outcome.failed:
        raise typer.Exit(EXIT_TRIALS_FAILED)

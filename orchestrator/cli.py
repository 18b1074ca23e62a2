"""`orchestrator` command line: run and validate study files."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from .study import StudyError, load_study
from .tracking import resolve_tracking_uri, ui_command

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Run DAPE-style ablation studies.")
console = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

EXIT_OK, EXIT_TRIALS_FAILED, EXIT_INVALID = 0, 1, 2


def _load_or_exit(path: Path):
    try:
        return load_study(path)
    except StudyError as error:
        err.print(f"[red]Invalid study[/red] {error}", markup=True)
        raise typer.Exit(EXIT_INVALID)


@app.command()
def validate(studies: Annotated[list[Path], typer.Argument(help="Study files to check.")]) -> None:
    """Check study files without running anything."""
    invalid = 0
    for path in studies:
        try:
            study = load_study(path)
        except StudyError as error:
            invalid += 1
            err.print(f"[red]Invalid study[/red] {error}")
            continue
        from .trials import expand

        console.print(f"{path}: valid, {len(expand(study))} trial(s)")
    if invalid:
        raise typer.Exit(EXIT_INVALID)


@app.command()
def run(
    study_path: Annotated[Path, typer.Argument(metavar="STUDY", help="The study file (YAML).")],
    tracking_uri: Annotated[Optional[str], typer.Option(help="MLflow tracking URI; default: MLFLOW_TRACKING_URI, else sqlite under ./mlruns.")] = None,
    address: Annotated[Optional[str], typer.Option(help="Ray cluster address; default: RAY_ADDRESS, else a local Ray.")] = None,
    reports_dir: Annotated[Path, typer.Option(help="Where reports are written.")] = Path("reports"),
) -> None:
    """Run every trial of a study that has not finished yet, then write its report."""
    study = _load_or_exit(study_path)
    from .runner import run_study  # heavy imports (ray, mlflow) only once the study is valid

    uri = resolve_tracking_uri(tracking_uri)
    console.print(f"Study [bold]{study.name}[/bold] from {study_path}; tracking at {uri}")
    outcome = run_study(study, uri, address=address, reports_dir=reports_dir)
    console.print()
    console.print(outcome.report_markdown, markup=False)
    console.print(f"Report: {outcome.report_dir / 'report.md'} (also attached to the study's parent run in MLflow)")
    console.print(f"Browse the runs: {ui_command(uri)}")
    if outcome.wall_seconds:
        console.print(f"Wall time {outcome.wall_seconds:.0f}s; {len(outcome.skipped)} trial(s) reused, "
                      f"{len(outcome.trials) - len(outcome.skipped)} run, {len(outcome.failed)} failed")
    if outcome.failed:
        raise typer.Exit(EXIT_TRIALS_FAILED)


EXIT_NO_RESULTS = 3  # the store has no such study (or no store at all)


@app.command()
def report(
    study_path: Annotated[Path, typer.Argument(metavar="STUDY", help="The study file (YAML).")],
    tracking_uri: Annotated[Optional[str], typer.Option(help="MLflow tracking URI; default: MLFLOW_TRACKING_URI, else sqlite under ./mlruns.")] = None,
    reports_dir: Annotated[Path, typer.Option(help="Where reports are written.")] = Path("reports"),
    value: Annotated[str, typer.Option(help="Which value of each run's metrics the cells show: final, best or step:N.")] = "final",
) -> None:
    """Build the study's report from the MLflow store: tables, significance, plots (Markdown, HTML, LaTeX, CSV)."""
    study = _load_or_exit(study_path)
    from .reporting import StudyNotFound, ValueChoice, build_report, open_study_store

    try:
        choice = ValueChoice.parse(value)
    except ValueError as error:
        err.print(f"[red]Invalid option[/red] --{error}")
        raise typer.Exit(EXIT_INVALID)
    uri = resolve_tracking_uri(tracking_uri)
    try:
        tracker = open_study_store(uri, study.name)
    except StudyNotFound as error:
        err.print(f"[red]No results[/red] {error}")
        raise typer.Exit(EXIT_NO_RESULTS)
    built = build_report(study, tracker, reports_dir, choice)
    console.print(built.markdown, markup=False)
    attached = "; attached to the study's parent run in MLflow" if tracker.parent_run_id else ""
    console.print(f"Report: {built.folder / 'report.html'} (also report.md, tables.tex, CSV, plots/){attached}")
    console.print(f"Browse the runs: orchestrator ui {study_path}" + (f" --tracking-uri {tracking_uri}" if tracking_uri else ""))


@app.command()
def ui(
    study_path: Annotated[Path, typer.Argument(metavar="STUDY", help="The study file (YAML).")],
    tracking_uri: Annotated[Optional[str], typer.Option(help="MLflow tracking URI; default: MLFLOW_TRACKING_URI, else sqlite under ./mlruns.")] = None,
    port: Annotated[int, typer.Option(help="Port of the MLflow UI started for a SQLite store.")] = 5000,
) -> None:
    """Open the study in MLflow's UI: starts `mlflow ui` on a SQLite store, or names the page on a server."""
    study = _load_or_exit(study_path)
    from . import mlflow_ui

    uri = resolve_tracking_uri(tracking_uri)
    try:
        if mlflow_ui.is_server(uri):
            experiment = mlflow_ui.experiment_id(uri, study.name)
            console.print(f"Study {study.name}: {mlflow_ui.experiment_url(uri, experiment)}")
            return
        console.print(f"Starting the MLflow UI on {uri} (Ctrl-C stops it)")
        code = mlflow_ui.serve(uri, study.name, port, lambda url: console.print(f"MLflow UI for study {study.name}: {url}"))
    except mlflow_ui.UIError as error:
        err.print(f"[red]Cannot show the UI[/red] {error}")
        raise typer.Exit(EXIT_NO_RESULTS)
    if code not in (0, -signal.SIGINT, -signal.SIGTERM):
        raise typer.Exit(code if code > 0 else 1)


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())

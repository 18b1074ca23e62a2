"""`orchestrator` command line: run and validate study files."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape

from .errors import ServiceUnreachable
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


def main() -> None:
    try:
        app()
    except ServiceUnreachable as error:  # a service is down: one paragraph, no traceback; re-running resumes
        err.print(f"[red]Study interrupted[/red] {escape(str(error))}")
        sys.exit(error.exit_code)


if __name__ == "__main__":
    sys.exit(main())

"""`orchestrator validate`: check study files without running anything, every file's problems in one run."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from .output import EXIT_INVALID, console, err


def split_overrides(arguments: list[str]) -> tuple[list[str], list[str]]:
    """(the studies, the KEY=VALUE overrides) of `validate`'s arguments: an argument with '=' that names no file
    is an override, as `run` and `plan` take them."""
    overrides = [arg for arg in arguments if "=" in arg and not Path(arg).exists()]
    return [arg for arg in arguments if arg not in overrides], overrides


def validate(arguments: list[str], profile: str | None) -> None:
    """Each study with the chosen profile, the overrides and its data, and every component its trials use
    against the component contract (dape_core/contract.py); every other profile's missing data is a note."""
    from ..planning.feasibility import check, machine_memory
    from ..study import StudyError, load_study, parse_override, profile_data_notes, read_study
    from ..study.locate import study_file
    from ..trial.trials import distinct, expand

    studies, given = split_overrides(arguments)
    try:
        overrides = dict(parse_override(text) for text in given)
    except ValueError as error:
        err.print(f"[red]Invalid argument[/red]: {escape(str(error))}")
        raise typer.Exit(EXIT_INVALID) from None
    if not studies:
        err.print("[red]Invalid argument[/red]: no study given (KEY=VALUE overrides follow a study file or name)")
        raise typer.Exit(EXIT_INVALID)
    invalid = 0
    for path in studies:
        try:
            file = study_file(path)
            study = load_study(file, profile=profile, overrides=overrides, check_data=True, contract=True,
                               feasibility=check(machine_memory()))
        except StudyError as error:
            invalid += 1
            err.print(f"[red]Invalid study[/red] {escape(str(error))}")
            continue
        profiles = f"; profiles: {', '.join(study.profiles)}" if study.profiles else ""
        expanded = expand(study)
        rows, trials = len(expanded), len(distinct(expanded))
        shared = f" ({rows} rows: {rows - trials} share another row's trial)" if rows != trials else ""
        console.print(f"{path}: valid, {trials} trial(s){shared}{profiles}")
        for note in profile_data_notes(read_study(file)[0], profile):
            console.print(f"  note: {escape(note)}")
    if invalid:
        raise typer.Exit(EXIT_INVALID)

"""`orchestrator doctor`: is this machine fit for a study (orchestrator/doctor/ does the checks)."""

from __future__ import annotations

import typer

from .output import EXIT_TRIALS_FAILED, console, err


def doctor(address: str | None, tracking_uri: str | None, quick: bool, connect_timeout: float) -> None:
    from ..doctor import run_doctor

    report = run_doctor(address, tracking_uri, quick, connect_timeout,
                        say=lambda line: console.print(line, markup=False),
                        progress=lambda line: err.print(line, markup=False))
    if report.failed:
        raise typer.Exit(EXIT_TRIALS_FAILED)

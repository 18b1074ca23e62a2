"""What every command prints to, and the exit codes they share (cli.py's docstring says what each means)."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer
from rich.console import Console

# Wide tables when the output is a file or a CI log, instead of rich's 80-column default.
_WIDTH = None if sys.stdout.isatty() else 160
console = Console(highlight=False, soft_wrap=True, width=_WIDTH)
err = Console(stderr=True, highlight=False, soft_wrap=True, width=_WIDTH)

EXIT_OK, EXIT_TRIALS_FAILED, EXIT_INVALID, EXIT_INTERRUPTED, EXIT_CLAIMS_FAILED, EXIT_CTRL_C = 0, 1, 2, 3, 4, 130
TRACKING_FLAG = "--tracking-uri "  # how StudyNotFound names the option on the command line


def stop(message: str, code: int) -> NoReturn:
    """Print `message` (rich markup) on stderr and end the command with `code`."""
    err.print(message)
    raise typer.Exit(code)


def first_line(error: BaseException) -> str:
    """An error's message in one line, for the one-paragraph errors of run and evaluate."""
    text = str(error).strip()
    if text.startswith("Traceback"):  # Ray wraps errors as a formatted traceback: keep its exception line
        from ..errors import last_error_line

        return last_error_line(text)
    lines = text.splitlines()
    return lines[0] if lines else "no message"


def browse_hint(study_path, tracking_uri: str | None) -> str:
    return (f"Browse the runs: orchestrator ui {study_path}"
            + (f" --tracking-uri {tracking_uri}" if tracking_uri else ""))

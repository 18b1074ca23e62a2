"""`orchestrator ui`: the study in MLflow's UI (`mlflow ui` started on a SQLite store, or the server's page)."""

from __future__ import annotations

import signal

import typer
from rich.markup import escape

from .invocation import Invocation
from .output import EXIT_INTERRUPTED, EXIT_INVALID, TRACKING_FLAG, console, stop


def ui(invocation: Invocation, port: int) -> None:
    from ..tracking import ui as mlflow_ui
    from ..tracking.lookup import StudyNotFound
    from ..tracking.uri import is_server

    study, uri = invocation.study, invocation.uri
    try:
        if is_server(uri):
            console.print(f"Study {study.name}: {mlflow_ui.show_on_server(uri, study.name)}")
            return
        console.print(f"Starting the MLflow UI on {uri} (Ctrl-C stops it)")
        code = mlflow_ui.serve(uri, study.name, port, lambda url: console.print(f"MLflow UI for study {study.name}: "
                                                                                f"{url}"))
    except mlflow_ui.UIError as error:
        stop(f"[red]Cannot show the UI[/red] {escape(str(error))}", EXIT_INTERRUPTED)
    except StudyNotFound as error:
        stop(f"[red]Cannot show the UI[/red] {escape(error.describe(TRACKING_FLAG))}", EXIT_INVALID)
    if code not in (0, -signal.SIGINT, -signal.SIGTERM):
        raise typer.Exit(code if code > 0 else 1)

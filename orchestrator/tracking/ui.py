"""`orchestrator ui`: MLflow's UI as the study's comparison dashboard.

For an embedded SQLite store it starts MLflow's tracking server app on 127.0.0.1 (uvicorn, one worker, no job
execution, warnings and request logs off) and, once it answers, writes the study's dashboard tags through the
server's REST API (tracking/dashboard.py) and prints the study's page: its trial runs with the study's charts. For a
tracking server it writes the same tags through MLflow's client and prints the page on that server.

This process never imports MLflow for a SQLite store (the server does, once): the UI serves sooner.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Callable

from . import dashboard
from .lookup import no_experiment, require_store
from .uri import is_server, sqlite_path

HOST = "127.0.0.1"
DEFAULT_PORT = 5000  # `orchestrator ui --port`'s default (cli.py)
STARTUP_TIMEOUT_S = 120.0
# Uvicorn's request log and start-up notes, and Starlette's deprecation warning about the WSGI bridge MLflow
# mounts its Flask app with, say nothing to a researcher; errors still show.
QUIET_UVICORN = "--log-level warning --no-access-log"
QUIET_WARNINGS = "ignore:starlette.middleware.wsgi is deprecated"


class UIError(RuntimeError):
    """The UI cannot be shown: the port is taken or the server does not start. (No such store or
    experiment: StudyNotFound.)"""


def experiment_url(base_url: str, experiment_id: str) -> str:
    return dashboard.experiment_page(base_url, experiment_id)


def local_address(port: int = DEFAULT_PORT) -> str:
    """Where `orchestrator ui` serves a SQLite store."""
    return f"http://{HOST}:{port}"


def run_url(tracking_uri: str, experiment_id: str, run_id: str) -> str | None:
    """A run's page in MLflow's UI: on the tracking server, or for a SQLite store where `orchestrator ui`
    serves it by default (only while it runs); None for any other store."""
    if is_server(tracking_uri):
        return dashboard.run_page(tracking_uri, experiment_id, run_id)
    if sqlite_path(tracking_uri) is not None:
        return dashboard.run_page(local_address(), experiment_id, run_id)
    return None


def show_on_server(tracking_uri: str, study_name: str) -> str:
    """For a tracking server: refresh the study's dashboard tags through MLflow's client (which honours the
    server's credentials, MLFLOW_TRACKING_TOKEN, ...) and return the study's page there."""
    from .store import StudyStore

    store = StudyStore.open(tracking_uri, study_name)
    store.refresh_dashboard()
    return experiment_url(tracking_uri, store.experiment_id)


def _api(base_url: str, path: str, payload: dict | None = None) -> dict:
    """One call of the MLflow server's REST API (GET without payload, POST with)."""
    data = json.dumps(payload).encode() if payload is not None else None
    request = urllib.request.Request(f"{base_url}/api/2.0/mlflow/{path}", data=data,
                                     headers={"Content-Type": "application/json"} if data else {})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)


def served_experiment_id(base_url: str, study_name: str) -> str | None:
    """Ask the UI server we started (its REST API) rather than opening the store a second time."""
    query = urllib.parse.urlencode({"experiment_name": study_name})
    try:
        return _api(base_url, f"experiments/get-by-name?{query}")["experiment"]["experiment_id"]
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise


def refresh_served_dashboard(base_url: str, experiment_id: str) -> None:
    """The dashboard tags of tracking/dashboard.py, from the trial runs, written through the REST API."""
    runs, token = [], None
    while True:
        page = _api(base_url, "runs/search", {"experiment_ids": [experiment_id], "max_results": 1000,
                                              "filter": dashboard.TRIAL_FILTER,
                                              **({"page_token": token} if token else {})})
        runs += page.get("runs", [])
        token = page.get("next_page_token")
        if not token:
            break
    seen = [({m["key"] for m in run["data"].get("metrics", [])},
             {t["key"]: t["value"] for t in run["data"].get("tags", [])}) for run in runs]
    tags = dashboard.dashboard_tags(dashboard.study_metrics(seen), int(time.time() * 1000))
    for key, value in tags.items():
        _api(base_url, "experiments/set-experiment-tag", {"experiment_id": experiment_id, "key": key, "value": value})


def server_command(tracking_uri: str, port: int) -> list[str]:
    """MLflow's tracking server app under uvicorn, started directly rather than through `mlflow ui`: that
    command is a second Python process which imports MLflow's CLI and opens the store before it starts
    uvicorn's own, and on this project's machines it doubled the time to the first page."""
    return [sys.executable, "-m", "uvicorn", *QUIET_UVICORN.split(), "--host", HOST, "--port", str(port),
            "--workers", "1", "mlflow.server.fastapi_app:app"]


def server_env(tracking_uri: str, artifacts: Path) -> dict[str, str]:
    """What `mlflow ui --backend-store-uri URI` hands its uvicorn worker (mlflow/server/__init__.py, _run_server;
    the names are mlflow.server.constants'), plus: no job execution (a task queue and workers the UI does not
    need), no telemetry (it would try the network), warnings and info logs off."""
    warnings = ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"), QUIET_WARNINGS]))
    return {**os.environ,
            "_MLFLOW_SERVER_FILE_STORE": tracking_uri, "_MLFLOW_SERVER_REGISTRY_STORE": tracking_uri,
            "_MLFLOW_SERVER_ARTIFACT_ROOT": "mlflow-artifacts:/", "_MLFLOW_SERVER_SERVE_ARTIFACTS": "true",
            "_MLFLOW_SERVER_ARTIFACT_DESTINATION": str(artifacts), "_MLFLOW_SGI_NAME": "uvicorn",
            "_MLFLOW_SERVER_BOOT_ID": uuid.uuid4().hex, "_MLFLOW_IN_JOB_EXECUTOR": "false",
            "MLFLOW_ENABLE_WORKSPACES": "false", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
            "MLFLOW_DISABLE_TELEMETRY": "true", "PYTHONWARNINGS": warnings,
            "MLFLOW_LOGGING_LEVEL": os.environ.get("MLFLOW_LOGGING_LEVEL", "WARNING")}


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


def _healthy(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base_url}/health", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def serve(tracking_uri: str, study_name: str, port: int, on_ready: Callable[[str], None]) -> int:
    """Run MLflow's UI on the store until it exits or this process is interrupted or terminated (the signal
    is passed on); `on_ready(study page URL)` is called once the server answers and the study's dashboard
    tags are written. Returns the server's exit code."""
    require_store(tracking_uri)
    if not _port_free(port):
        raise UIError(f"port {port} on {HOST} is in use: pass another with --port")
    base_url = local_address(port)
    # Artifacts of runs whose artifact location is the server's default (never the orchestrator's: its
    # experiments keep theirs beside the SQLite file) would go beside the store, as `mlflow ui` would.
    database = sqlite_path(tracking_uri)
    assert database is not None, "serve() is for an embedded SQLite store (a tracking server: show_on_server)"
    artifacts = database.parent / "mlartifacts"
    server = subprocess.Popen(server_command(tracking_uri, port), env=server_env(tracking_uri, artifacts))

    def forward(signum, _frame):
        if server.poll() is None:
            server.send_signal(signum)  # uvicorn shuts down gracefully on SIGINT and SIGTERM

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while server.poll() is None and not _healthy(base_url):
            if time.monotonic() > deadline:
                raise UIError(f"the MLflow server did not answer on {base_url} within {STARTUP_TIMEOUT_S:.0f}s")
            time.sleep(0.2)
        if server.poll() is None:
            experiment = served_experiment_id(base_url, study_name)
            if experiment is None:
                raise no_experiment(tracking_uri, study_name)
            refresh_served_dashboard(base_url, experiment)
            on_ready(experiment_url(base_url, experiment))
        return server.wait()
    finally:
        if server.poll() is None:
            server.terminate()
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
        for sig, handler in previous.items():
            signal.signal(sig, handler)

"""`orchestrator ui`: MLflow's UI as the study's comparison dashboard.

For an embedded SQLite store it starts `mlflow ui` on 127.0.0.1 (one worker, no job execution: starts in
seconds and stays small) and prints the study's experiment page once the server answers; for a tracking
server it only prints the experiment's page on that server.
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
from typing import Callable

from .store import StudyStore, no_experiment, require_store

HOST = "127.0.0.1"
STARTUP_TIMEOUT_S = 120.0


class UIError(RuntimeError):
    """The UI cannot be shown: the port is taken or the server does not start. (No such store or
    experiment: StudyNotFound.)"""


def experiment_url(base_url: str, experiment_id: str) -> str:
    return f"{base_url.rstrip('/')}/#/experiments/{experiment_id}"


def experiment_id(tracking_uri: str, study_name: str) -> str:
    """Through MLflow's client, which honours the server's credentials (MLFLOW_TRACKING_TOKEN, ...)."""
    return StudyStore.open(tracking_uri, study_name).experiment_id


def served_experiment_id(base_url: str, study_name: str) -> str | None:
    """Ask the UI server we started (its REST API) rather than opening the store a second time."""
    query = urllib.parse.urlencode({"experiment_name": study_name})
    try:
        with urllib.request.urlopen(f"{base_url}/api/2.0/mlflow/experiments/get-by-name?{query}", timeout=30) as response:
            return json.load(response)["experiment"]["experiment_id"]
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return None
        raise


def server_command(tracking_uri: str, port: int) -> list[str]:
    return [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", tracking_uri,
            "--host", HOST, "--port", str(port), "--workers", "1"]


def server_env() -> dict[str, str]:
    # Job execution spawns a task queue and workers the UI does not need; telemetry would try the network.
    return {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}


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
    """Run `mlflow ui` on the store until it exits or this process is interrupted or terminated (the signal
    is passed on); `on_ready(experiment page URL)` is called once the server answers. Returns its exit code."""
    require_store(tracking_uri)
    if not _port_free(port):
        raise UIError(f"port {port} on {HOST} is in use: pass another with --port")
    base_url = f"http://{HOST}:{port}"
    server = subprocess.Popen(server_command(tracking_uri, port), env=server_env())

    def forward(signum, _frame):
        if server.poll() is None:
            server.send_signal(signum)  # mlflow passes it on to its uvicorn worker and exits

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while server.poll() is None and not _healthy(base_url):
            if time.monotonic() > deadline:
                raise UIError(f"mlflow ui did not answer on {base_url} within {STARTUP_TIMEOUT_S:.0f}s")
            time.sleep(0.3)
        if server.poll() is None:
            experiment = served_experiment_id(base_url, study_name)
            if experiment is None:
                raise no_experiment(tracking_uri, study_name)
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

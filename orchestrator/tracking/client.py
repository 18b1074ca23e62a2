"""The MLflow client the store uses: every call raises TrackingServerUnreachable, a one-paragraph
explanation with what to do, when the tracking server cannot be reached, instead of a deep HTTP error; and
StoreUnusable when an embedded SQLite store turns out damaged, instead of SQLAlchemy's traceback.

`probe_server` asks a tracking server once, with a short timeout, before anything starts: the MLflow client's
own retries (minutes, silently) are for outages in the middle of a study, not for a wrong address."""

from __future__ import annotations

import functools
import os
import re
import sqlite3

import requests
from mlflow.environment_variables import MLFLOW_HTTP_REQUEST_MAX_RETRIES, MLFLOW_HTTP_REQUEST_TIMEOUT
from mlflow.tracking import MlflowClient

from ..errors import StoreUnusable, TrackingServerUnreachable, UserInputError, exception_chain
from .sqlite_file import is_lock, locked

DEFAULT_CONNECT_TIMEOUT_S = 10.0


class ReachabilityCheckedClient:
    """An MlflowClient whose calls raise TrackingServerUnreachable, a one-paragraph explanation, when the
    tracking server cannot be reached (after the MLflow client's own retries) instead of a deep HTTP error."""

    def __init__(self, client: MlflowClient, tracking_uri: str):
        self._client = client
        self._tracking_uri = tracking_uri

    def __getattr__(self, name: str):
        attribute = getattr(self._client, name)
        if not callable(attribute):
            return attribute

        @functools.wraps(attribute)
        def checked(*args, **kwargs):
            try:
                return attribute(*args, **kwargs)
            except Exception as error:
                lock = next((cause for cause in exception_chain(error) if is_lock(cause)), None)
                if lock is not None:  # busy, not damaged: the same command succeeds once the other writer is done
                    raise locked(self._tracking_uri, lock, None, "What was recorded before is kept; the same "
                                 "command resumes without repeating it.") from error
                damaged = database_failure(error)
                if damaged is not None:
                    raise StoreUnusable(
                        f"The tracking store {self._tracking_uri} cannot be read: {damaged}. If it was damaged, "
                        "restore it from a backup; to start a new store, move it away or pass another "
                        "--tracking-uri.") from error
                reason = connection_failure(error)
                if reason is None:
                    raise
                raise TrackingServerUnreachable(unreachable_message(self._tracking_uri, reason)) from error

        return checked


def database_failure(error: BaseException) -> str | None:
    """SQLite's own words when the database file is damaged ("database disk image is malformed"), else None.
    A locked database or a constraint is not damage: those are left to the caller."""
    for cause in exception_chain(error):
        if isinstance(cause, sqlite3.DatabaseError) and not isinstance(
                cause, (sqlite3.OperationalError, sqlite3.IntegrityError)):
            return str(cause)
    return None


def connection_failure(error: BaseException) -> str | None:
    """A short reason ("[Errno 111] Connection refused") when an HTTP request never got an answer, else None."""
    for cause in exception_chain(error):
        if isinstance(cause, (requests.exceptions.ConnectionError, requests.exceptions.Timeout,
                              requests.exceptions.RetryError)):
            text = str(cause)
            found = re.search(r"\[Errno -?\d+\] [^'\")\]]+|Read timed out|too many \d+ error responses", text)
            return found.group(0).strip() if found else type(cause).__name__
    return None


def unreachable_message(tracking_uri: str, reason: str) -> str:
    return (f"MLflow tracking server at {tracking_uri} is unreachable ({reason}). Trials that finished before are "
            "safe in its store. When the server is back, run the same command again: finished trials are skipped "
            "and the others run again. (The MLflow client gives up after "
            f"MLFLOW_HTTP_REQUEST_MAX_RETRIES={MLFLOW_HTTP_REQUEST_MAX_RETRIES.get()} retries of up to "
            f"MLFLOW_HTTP_REQUEST_TIMEOUT={MLFLOW_HTTP_REQUEST_TIMEOUT.get()}s each; raise them to ride out longer "
            "outages.)")


class TrackingLoginRefused(UserInputError):
    """The tracking server asks for a login this command does not have (HTTP 401 or 403)."""


def probe_server(tracking_uri: str, timeout: float = DEFAULT_CONNECT_TIMEOUT_S) -> None:
    """One request to the server's /health, bounded by `timeout` seconds; any HTTP answer (even an error
    status behind a proxy) means it is reachable. Raises TrackingServerUnreachable otherwise. Then one API
    request with the login MLflow's client would send (MLFLOW_TRACKING_USERNAME/PASSWORD or _TOKEN; /health
    asks for none): TrackingLoginRefused where the server refuses it, before anything starts."""
    base = tracking_uri.rstrip("/")
    try:
        requests.get(f"{base}/health", timeout=(timeout, timeout), allow_redirects=False)
    except requests.exceptions.RequestException as error:
        reason = connection_failure(error) or type(error).__name__
        raise TrackingServerUnreachable(
            f"MLflow tracking server at {tracking_uri} is unreachable ({reason}): one request to its /health, "
            f"given {timeout:g}s (--connect-timeout), got no answer. Check the address and that the server is up, "
            "then run the same command again. Nothing was started.") from error
    try:
        answer = requests.get(f"{base}/api/2.0/mlflow/experiments/search", params={"max_results": 1},
                              timeout=(timeout, timeout), allow_redirects=False, headers=_login_headers())
    except requests.exceptions.RequestException as error:  # alive, but its API (its backend store) does not answer
        reason = connection_failure(error) or type(error).__name__
        raise TrackingServerUnreachable(
            f"MLflow tracking server at {tracking_uri} answers its /health but not its API ({reason}): one request "
            f"to /api/2.0/mlflow/experiments/search, given {timeout:g}s (--connect-timeout), got no answer. The "
            "server is up; its backend store (its database) may be down, locked or overloaded. Check the server's "
            "log, then run the same command again. Nothing was started.") from error
    if answer.status_code in (401, 403):
        given = "the login in MLFLOW_TRACKING_USERNAME/PASSWORD" if os.environ.get("MLFLOW_TRACKING_USERNAME") \
            else "no login (MLFLOW_TRACKING_USERNAME/PASSWORD unset)"
        raise TrackingLoginRefused(
            f"The MLflow tracking server at {tracking_uri} refused {given} (HTTP {answer.status_code}). Set "
            "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or MLFLOW_TRACKING_TOKEN) to a login it "
            "accepts; a SLURM job's server has its own in slurm/job-JOBID/mlflow-credentials (`set -a; . FILE; "
            "set +a`). Nothing was started.")


def _login_headers() -> dict[str, str]:
    """The Authorization header MLflow's client sends from the environment, if any."""
    import base64

    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if user and password:
        return {"Authorization": "Basic " + base64.standard_b64encode(f"{user}:{password}".encode()).decode()}
    if os.environ.get("MLFLOW_TRACKING_TOKEN"):
        return {"Authorization": f"Bearer {os.environ['MLFLOW_TRACKING_TOKEN']}"}
    return {}

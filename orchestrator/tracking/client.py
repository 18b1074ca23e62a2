"""The MLflow client the store uses: every call raises TrackingServerUnreachable, a one-paragraph
explanation with what to do, when the tracking server cannot be reached, instead of a deep HTTP error."""

from __future__ import annotations

import functools
import re

import requests
from mlflow.environment_variables import MLFLOW_HTTP_REQUEST_MAX_RETRIES, MLFLOW_HTTP_REQUEST_TIMEOUT
from mlflow.tracking import MlflowClient

from ..errors import TrackingServerUnreachable, exception_chain


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
                reason = connection_failure(error)
                if reason is None:
                    raise
                raise TrackingServerUnreachable(unreachable_message(self._tracking_uri, reason)) from error

        return checked


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

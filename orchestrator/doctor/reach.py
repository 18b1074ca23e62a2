"""Can this machine reach the Ray cluster and the MLflow store a study would use? Each answer bounded in time,
through the helpers `orchestrator run` uses at start (execution/cluster.py, tracking/client.py)."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

from dape_core.doctor import FAIL, PASS, SKIP, Outcome


def ray_cluster(address: str | None, timeout: float) -> Outcome:
    """Join the cluster at `address` (else RAY_ADDRESS), say what it has, leave it."""
    address = address or os.environ.get("RAY_ADDRESS")
    name = "Ray cluster"
    if not address:
        return Outcome(SKIP, name, "no --address given (nor RAY_ADDRESS): `orchestrator run` would start a local Ray")
    import ray

    from ..errors import RayClusterUnreachable
    from ..execution.cluster import connect, live_nodes

    name = f"Ray cluster at {address}"
    if ray.is_initialized():
        return Outcome(SKIP, name, "Ray is already initialized in this process")
    start = time.perf_counter()
    try:
        connect(address, timeout)
        nodes = live_nodes()
    except RayClusterUnreachable as error:
        return Outcome(FAIL, name, str(error))
    except Exception as error:  # noqa: BLE001 - refused, version mismatch, authentication: all this check's failure
        return Outcome(FAIL, name, f"{type(error).__name__}: {error}"[:300])
    finally:
        if ray.is_initialized():
            ray.shutdown()
    cpus = sum(node.get("CPU", 0.0) for node in nodes)
    gpus = sum(node.get("GPU", 0.0) for node in nodes)
    took = time.perf_counter() - start
    return Outcome(PASS, name, f"joined in {took:.1f} s: {len(nodes)} live node(s), {cpus:g} CPU, {gpus:g} GPU")


def tracking_store(uri: str | None, timeout: float) -> Outcome:
    """A tracking server answers its /health; a SQLite store opens (or its folder can take one); anything else
    answers one MLflow call within `timeout`."""
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        return Outcome(SKIP, "MLflow tracking store", "no --tracking-uri given (nor MLFLOW_TRACKING_URI): each study "
                                                      "uses mlruns/mlflow.db in its project folder")
    from ..tracking.uri import is_server, sqlite_path

    name = f"MLflow tracking store {uri}"
    start = time.perf_counter()
    if is_server(uri):
        from ..errors import TrackingServerUnreachable
        from ..tracking.client import TrackingLoginRefused, probe_server

        try:
            probe_server(uri, timeout)
        except (TrackingServerUnreachable, TrackingLoginRefused) as error:
            return Outcome(FAIL, name, str(error))
        return Outcome(PASS, name, f"the server answered in {1e3 * (time.perf_counter() - start):.0f} ms")
    path = sqlite_path(uri)
    if path is not None:
        return _sqlite(name, path)
    return _one_call(name, uri, timeout)


def _sqlite(name: str, path: Path) -> Outcome:
    if not path.is_file():
        folder = next((parent for parent in path.parents if parent.exists()), None)
        if folder is not None and os.access(folder, os.W_OK):
            return Outcome(PASS, name, f"no store there yet; the first run creates it ({folder} is writable)")
        return Outcome(FAIL, name, f"no store there, and {folder} cannot be written: the first run could not create it")
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as connection:
            (count,) = connection.execute("SELECT count(*) FROM experiments").fetchone()
    except sqlite3.Error as error:
        return Outcome(FAIL, name, f"{path} cannot be read as an MLflow store: {error}")
    return Outcome(PASS, name, f"{count} experiment(s)")


def _one_call(name: str, uri: str, timeout: float) -> Outcome:
    """Other stores (a database URI): one search, in a helper thread abandoned after `timeout`."""
    outcome: dict[str, object] = {}

    def ask() -> None:
        try:
            from mlflow.tracking import MlflowClient

            outcome["found"] = len(MlflowClient(uri).search_experiments(max_results=5))
        except Exception as error:  # noqa: BLE001 - handed to the caller's thread
            outcome["error"] = error

    helper = threading.Thread(target=ask, name="mlflow-probe", daemon=True)
    helper.start()
    helper.join(timeout)
    if helper.is_alive():
        return Outcome(FAIL, name, f"no answer within {timeout:g} s (--connect-timeout)")
    if "error" in outcome:
        error = outcome["error"]
        return Outcome(FAIL, name, f"{type(error).__name__}: {error}"[:300])
    return Outcome(PASS, name, f"answered: {outcome['found']} experiment(s) listed")

"""Reaching Ray, bounded in time, and checking that it can host one trial before any trial is launched.

Without these checks a wrong `--address` waits minutes inside `ray.init` before failing, and a trial that no
node can host (`resources.gpus: 0.5` on a machine without a GPU, more `resources.cpus` than any node has)
stays PENDING in Ray Tune for ever, silently. Here:

- `connect`: a private local Ray (the default), or the cluster at an address: first one TCP connection to it
  with a timeout (a dead port fails at once), then `ray.init` in a helper thread, abandoned after the same
  timeout (Ray's own connection retries last minutes).
- `start_local_early`: the private local Ray started in a background thread while the caller does other work
  (`orchestrator run` opens a new store meanwhile: both take seconds); `connect` then waits for it.
- `require_placeable`: a trial needs ONE node with its CPUs and GPUs (its bundles of resources; one bundle per
  one-worker trial). If no live node can host it, the answer depends on whether the cluster can grow: a
  fixed cluster (the local Ray, a cluster without autoscaler) is refused at once (exit 2, with what to change);
  on an autoscaling cluster whose node groups could host it, the check waits a bounded time for a node to
  join (then exit 3: the autoscaler may be at its limit).
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
import threading
import time
from typing import Any, Callable

# Ray is imported where it is used: the runner reads this module without loading Ray.
from ..errors import RayClusterUnreachable, ResourcesNotArrived, ResourcesUnavailable
from ..library_logs import reroute
from ..run_context import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_RESOURCE_WAIT_S
from . import interrupt

_POLL_S = 5.0

Bundle = dict[str, float]


_early: dict[str, Any] = {}  # the background start of the local Ray (start_local_early): its thread, its error


def local_token_auth() -> None:
    """Token authentication for the private local Ray, chosen here rather than by Ray's default: the same
    setting (Ray turns it on for a new local cluster where RAY_AUTH_MODE is unset, and makes the token), without
    the warning Ray prints at every start that it did so. A RAY_AUTH_MODE the user set is kept."""
    os.environ.setdefault("RAY_AUTH_MODE", "token")


def start_local_early() -> None:
    """Start the private local Ray in a background thread, now (`ray.init` waits for processes it spawns, so the
    caller's own work goes on meanwhile); the next `connect` waits for it, takes over what `ray.init` did to
    the signals and loggers in the main thread, and raises its error where it failed. Only the private local
    Ray: a cluster's address is checked by `connect` itself, within its timeout."""
    if _early or os.environ.get("RAY_ADDRESS"):
        return
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():  # this process has its Ray already (a test's, a notebook's)
        return

    started, forever = threading.Event(), threading.Event()

    def start() -> None:
        try:
            import ray

            reroute()  # the terminal handlers Ray's import gave its loggers: to the study's log file
            local_token_auth()
            ray.init(address="local", num_cpus=os.cpu_count(), **_INIT_OPTIONS)
        except BaseException as error:  # handed to the main thread by `connect`
            _early["error"] = error
        started.set()
        # Ray's processes die with the thread that spawned them (Linux PR_SET_PDEATHSIG, which Ray sets): this
        # one stays, idle, until the process ends (a daemon thread does not delay its exit).
        forever.wait()

    _early["started"] = started
    threading.Thread(target=start, name="ray-start", daemon=True).start()


def _join_early() -> None:
    started = _early.pop("started", None)
    if started is None:
        return
    started.wait()
    interrupt.reclaim()  # what ray.init did to SIGTERM, as after a start in this thread
    reroute()
    error = _early.pop("error", None)
    if error is not None:
        raise error


# Ray's own log lines would drown the progress; errors still surface through the trial results.
_INIT_OPTIONS: dict[str, Any] = dict(include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)


def connect(address: str | None, timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
            unreachable_message: Callable[[str, Exception], str] | None = None) -> None:
    """Start or join Ray. Raises RayClusterUnreachable (one paragraph) when the address does not answer within
    `timeout` seconds, or refuses the driver (`unreachable_message(address, error)` words it). A start begun by
    `start_local_early` is waited for first."""
    import ray

    _join_early()
    if ray.is_initialized():
        return
    common = _INIT_OPTIONS
    address = address or os.environ.get("RAY_ADDRESS")
    if not address or address == "local":
        # "local" starts a private Ray even when a `ray start` cluster is running on this machine.
        local_token_auth()
        ray.init(address="local", num_cpus=os.cpu_count(), **common)
        interrupt.reclaim()  # ray.init took SIGTERM (a Python handler, and a native one that dumps and aborts)
        reroute()  # and may have set its loggers' terminal handlers again (library_logs.py)
        return
    _probe(address, timeout)
    os.environ.setdefault("RAY_gcs_server_port_wait_time_s", str(max(1, int(timeout))))
    outcome: dict[str, BaseException] = {}

    def join() -> None:
        try:
            ray.init(address=address, **common)
        except BaseException as error:  # handed to the caller's thread
            outcome["error"] = error

    helper = threading.Thread(target=join, name="ray-connect", daemon=True)
    helper.start()
    helper.join(timeout)
    if helper.is_alive():
        raise RayClusterUnreachable(
            f"The Ray cluster at {address} did not answer within {timeout:g}s (--connect-timeout). Check the "
            "address (HOST:PORT of the head's GCS, ray://HOST:10001 for Ray Client) and that the head is up. "
            "No trial was run.")
    interrupt.reclaim()  # the core worker's native SIGTERM handler, installed from the helper thread too
    reroute()
    if "error" in outcome:
        error = outcome["error"]
        if isinstance(error, Exception) and unreachable_message is not None and _is_connection_error(error):
            raise RayClusterUnreachable(unreachable_message(address, error)) from error
        raise error


def kill_private_ray() -> None:
    """Kill the processes of the private Ray this driver started, by process id and without waiting (the
    last resort of a stop that Ray could not finish: interrupt.py); a joined cluster is left alone."""
    worker = sys.modules.get("ray._private.worker")
    node = getattr(worker, "_global_node", None)
    if node is not None and getattr(node, "head", False):
        node.kill_all_processes(check_alive=False, allow_graceful=False)


def _is_connection_error(error: Exception) -> bool:
    from ray.exceptions import AuthenticationError

    return isinstance(error, (ConnectionError, AuthenticationError, TimeoutError))


def _probe(address: str, timeout: float) -> None:
    """One TCP connection to HOST:PORT of the address, bounded by `timeout`; `auto` and addresses without
    a port are left to Ray."""
    found = re.fullmatch(r"(?:ray://)?\[?([^\[\]/]+?)\]?:(\d+)/?", address.strip())
    if not found:
        return
    host, port = found.group(1), int(found.group(2))
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise RayClusterUnreachable(
            f"Cannot connect to the Ray cluster at {address} ({reason}; one try with a {timeout:g}s timeout). "
            "Check the address (HOST:PORT of the head's GCS, ray://HOST:10001 for Ray Client, or auto on a "
            "cluster node) and that the head is up. No trial was run.") from error


# --- can the cluster host a trial? --------------------------------------------------------------------------
def one_worker_bundles(cpus: float, gpus: float) -> list[Bundle]:
    """What one one-worker trial reserves: one bundle, on one node."""
    return [{"CPU": float(cpus), "GPU": float(gpus)}]


def live_nodes() -> list[dict[str, float]]:
    """Each live node's total resources (CPU, GPU, memory, ...)."""
    import ray

    return [dict(node.get("Resources", {})) for node in ray.nodes() if node.get("Alive")]


def fits(bundles: list[Bundle], nodes: list[dict[str, float]]) -> bool:
    """Whether each bundle fits on some node by itself (Ray places a trial's bundles on nodes that have
    room; the whole trial need not fit on one node unless it is one bundle)."""
    return all(any(all(node.get(key, 0.0) >= amount for key, amount in bundle.items() if amount > 0)
                   for node in nodes) for bundle in bundles)


def autoscaling_groups() -> list[dict[str, float]]:
    """Resources of the node groups an autoscaler may still add (KubeRay, `ray up`); empty for a fixed
    cluster. Read from the cluster config that Ray's autoscaler publishes in the GCS."""
    try:
        from ray._private.state import state

        config = state.get_cluster_config()
    except Exception:  # no such API in this Ray, or no config: treat the cluster as fixed
        return []
    if config is None:
        return []
    return [dict(group.resources) for group in config.node_group_configs
            if group.max_count != 0 and (group.max_count == -1 or group.max_count > group.min_count)]


def require_placeable(bundles: list[Bundle], where: str, wait_s: float = DEFAULT_RESOURCE_WAIT_S,
                      say: Callable[[str], None] = print) -> None:
    """Return once some node can host a trial of `bundles`; raise ResourcesUnavailable (exit 2) where no node
    can and the cluster cannot grow one, ResourcesNotArrived (exit 3) after `wait_s` on a growing cluster."""
    nodes = live_nodes()
    if fits(bundles, nodes):
        return
    groups = autoscaling_groups()
    if not fits(bundles, groups):
        raise ResourcesUnavailable(_unplaceable_message(bundles, nodes, where))
    say(f"No node of {where} can host a trial yet ({_needs(bundles)}); its autoscaler can add one: waiting up to "
        f"{wait_s:.0f}s (--resource-wait) for it.")
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(min(_POLL_S, max(0.0, deadline - time.monotonic())))
        if fits(bundles, live_nodes()):
            return
    raise ResourcesNotArrived(
        f"After {wait_s:.0f}s no node of {where} can host a trial ({_needs(bundles)}), although its autoscaler "
        "could add one: it may be at its limit or failing to start nodes. Check the autoscaler, then run the same "
        "command again (or raise --resource-wait). No trial was run.")


def _needs(bundles: list[Bundle]) -> str:
    return " + ".join(", ".join(f"{amount:g} {key}" for key, amount in bundle.items() if amount > 0) or "nothing"
                      for bundle in bundles)


def _unplaceable_message(bundles: list[Bundle], nodes: list[dict[str, float]], where: str) -> str:
    largest = {key: max((node.get(key, 0.0) for node in nodes), default=0.0) for key in ("CPU", "GPU")}
    shape = (f"{len(nodes)} node{'s' if len(nodes) != 1 else ''}; the largest has {largest['CPU']:g} CPU and "
             f"{largest['GPU']:g} GPU")
    wanted = {key: max(bundle.get(key, 0.0) for bundle in bundles) for key in ("CPU", "GPU")}
    changes = []  # (what to do, the override that does it)
    if wanted["GPU"] > largest["GPU"]:
        changes.append(("set resources.gpus: 0 (the trials then run on CPU)", "resources.gpus=0")
                       if largest["GPU"] == 0 else
                       (f"set resources.gpus to at most {largest['GPU']:g}", f"resources.gpus={largest['GPU']:g}"))
    if wanted["CPU"] > largest["CPU"]:
        changes.append((f"set resources.cpus to at most {largest['CPU']:g}", f"resources.cpus={largest['CPU']:g}"))
    if not changes:
        changes.append(("ask for less per trial in resources:", "resources.cpus=1"))
    what = " and ".join(change for change, _ in changes)
    overrides = " ".join(override for _, override in changes)
    return (f"No node of {where} can host a trial: each asks for {_needs(bundles)} on one node, and {where} has "
            f"{shape}. Either {what} (in the study file, or on the command line: {overrides}), or run on a "
            "cluster that has such nodes (--address). No trial was run.")

"""What the SLURM job script runs on its nodes: `python -m orchestrator.slurm.node COMMAND ...`.

- `address`: this node's IPv4 address as SLURM knows it (its `NodeAddr`, resolved), so that Ray advertises
  the address the cluster's own daemons use rather than whatever the host name resolves to first on a node
  with several networks (Ethernet, InfiniBand). Without `scontrol`, or for a node SLURM does not name, the
  host name's address.
- `free-port`: a TCP port nobody listens on now (two jobs may share a node: no fixed Ray or MLflow port).
- `ray-start head PORT TEMP_ROOT` / `ray-start worker HEAD:PORT TEMP_ROOT`: `ray start --block` with this
  node's address and the resources SLURM granted it: its CPUs (SLURM_CPUS_ON_NODE) and the GPUs it bound to
  the job (CUDA_VISIBLE_DEVICES, which Ray also uses to pick them); Ray's folder is TEMP_ROOT-NODE, removed
  when Ray stops.
- `mlflow-server JOB_DIR HOST PORT BACKEND_URI ARTIFACT_ROOT`: the job's MLflow server for a SQLite store,
  behind a login made for the job (server.py), written into JOB_DIR (0700, its files 0600).
- `wait-http URL TIMEOUT`: wait until URL answers 200 (the job's MLflow server).
- `wait-nodes HEAD:PORT COUNT TIMEOUT`: wait until COUNT nodes are alive in that Ray cluster; after TIMEOUT
  seconds exit 1 with a message naming the nodes that did join.
Only the standard library at import; Ray is imported by `wait-nodes`.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from typing import Callable

_POLL_S = 1.0
_STOP_GRACE_S = 10.0


def node_addr(scontrol_output: str) -> str | None:
    """The NodeAddr field of `scontrol show node NAME`."""
    found = re.search(r"\bNodeAddr=(\S+)", scontrol_output)
    return found.group(1) if found else None


def ipv4(host: str) -> str:
    return str(socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0])  # AF_INET: (host, port)


def node_address(node_name: str | None = None) -> str:
    """This node's address: SLURM's NodeAddr of `node_name` (default SLURMD_NODENAME), else the host name's."""
    name = node_name or os.environ.get("SLURMD_NODENAME")
    if name:
        try:
            shown = subprocess.run(["scontrol", "show", "node", name], capture_output=True, text=True, timeout=30)
            addr = node_addr(shown.stdout) if shown.returncode == 0 else None
            if addr:
                return ipv4(addr)
        except (OSError, subprocess.SubprocessError):
            pass
    return ipv4(socket.gethostname())


def free_port(host: str = "") -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def granted_gpus(environ: Mapping[str, str] | None = None) -> int:
    """The GPUs SLURM bound to this job on this node: the entries of CUDA_VISIBLE_DEVICES."""
    devices = (environ if environ is not None else os.environ).get("CUDA_VISIBLE_DEVICES", "")
    return len([device for device in devices.split(",") if device.strip() and device.strip() != "NoDevFiles"])


def granted_cpus(environ: Mapping[str, str] | None = None) -> int:
    env = environ if environ is not None else os.environ
    for key in ("SLURM_CPUS_ON_NODE", "SLURM_CPUS_PER_TASK"):
        if env.get(key, "").isdigit():
            return int(env[key])
    return os.cpu_count() or 1


def ray_start_argv(role: str, target: str, temp_dir: str, address: str,
                   environ: Mapping[str, str] | None = None) -> list[str]:
    """`ray start --block` for the head (`target`: its port) or a worker (`target`: the head's HOST:PORT)."""
    argv = ["ray", "start", "--block", "--node-ip-address", address, "--num-cpus", str(granted_cpus(environ)),
            "--num-gpus", str(granted_gpus(environ)), "--temp-dir", temp_dir, "--disable-usage-stats"]
    if role == "head":
        return argv + ["--head", "--port", target, "--include-dashboard", "false"]
    return argv + ["--address", target]


def run_ray_node(role: str, target: str, temp_root: str, grace: float = _STOP_GRACE_S) -> int:
    """Run this node's `ray start --block` until it ends; on TERM or INT stop it, and every process it started,
    within `grace` seconds (well inside SLURM's KillWait, after which SLURM kills what it still tracks: with
    proctrack/linuxproc, not the Ray processes a dying `ray start` leaves behind). Then remove the node-local
    folder (`temp_root`-NODE: two nodes may share a machine's /tmp)."""
    name = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    temp_dir = f"{temp_root}-{name}"
    argv = ray_start_argv(role, target, temp_dir, node_address())
    print(f"{name}: {' '.join(argv)}", flush=True)
    # No draining on TERM (Ray Serve's grace period, 30 s by default): nothing here serves traffic.
    env = {**os.environ, "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
    # Its own session: Ray's daemons and workers stay in it (workers make process groups of their own).
    process = subprocess.Popen(argv, env=env, start_new_session=True)
    deadline: list[float] = []

    def stop(signum, frame) -> None:
        if not deadline:
            deadline.append(time.monotonic() + grace)
            _signal_session(process.pid, signal.SIGTERM)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    try:
        while process.poll() is None and not (deadline and time.monotonic() > deadline[0]):
            time.sleep(0.2)
        return process.returncode if process.returncode is not None else 128 + signal.SIGTERM
    finally:
        _signal_session(process.pid, signal.SIGKILL)  # whatever of it is left
        process.poll()
        shutil.rmtree(temp_dir, ignore_errors=True)


def session_members(session: int) -> list[int]:
    """The processes of a session (field 6 of /proc/PID/stat)."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != "Z":  # after "pid (comm)": state, ppid, pgrp, session
            members.append(int(entry))
    return members


def _signal_session(session: int, signum: int) -> None:
    for pid in session_members(session):
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def wait_for(alive_nodes: Callable[[], list[str]], expected: int, timeout: float, poll: float = _POLL_S,
             say: Callable[[str], None] = print, bound: float | None = None) -> bool:
    """Poll `alive_nodes` (the addresses of the nodes alive now) until `expected` are there or `timeout` passes.
    `bound`: the whole wait the message names (--join-timeout), where part of it was spent before."""
    bound = timeout if bound is None else bound
    deadline = time.monotonic() + timeout
    while True:
        alive = alive_nodes()
        if len(alive) >= expected:
            say(f"All {expected} node(s) joined Ray: {', '.join(sorted(alive))}")
            return True
        if time.monotonic() >= deadline:
            say(f"Only {len(alive)} of {expected} node(s) joined Ray within {bound:g}s (--join-timeout): "
                f"{', '.join(sorted(alive)) or 'none'}. The job stops without running the study: nothing was "
                "written to the tracking store. The nodes' `ray start` output is in this log.")
            return False
        time.sleep(min(poll, max(0.0, deadline - time.monotonic())))


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def _until(ready: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_S)
    return True


def wait_nodes(address: str, expected: int, timeout: float) -> int:
    started = time.monotonic()
    host, port = address.rsplit(":", 1)
    if not _until(lambda: _port_open(host, int(port)), timeout):
        print(f"The Ray head at {address} did not start within {timeout:g}s (--join-timeout); its `ray start` "
              "output is in this log. The job stops without running the study.")
        return 1
    import ray

    ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    try:
        alive = lambda: [node["NodeManagerAddress"] for node in ray.nodes() if node.get("Alive")]  # noqa: E731
        left = max(0.0, timeout - (time.monotonic() - started))
        return 0 if wait_for(alive, expected, left, bound=timeout) else 1
    finally:
        ray.shutdown()


def main(argv: list[str]) -> int:
    command, args = (argv[0], argv[1:]) if argv else ("", [])
    if command == "address" and len(args) <= 1:
        print(node_address(*args))
    elif command == "free-port" and len(args) <= 1:
        print(free_port(*args))
    elif command == "ray-start" and len(args) == 3 and args[0] in ("head", "worker"):
        role, target, temp_root = args
        return run_ray_node(role, target, temp_root)
    elif command == "mlflow-server" and len(args) == 5:
        from .server import serve

        serve(*args)
    elif command == "wait-http" and len(args) == 2:
        if not _until(lambda: _answers(args[0]), float(args[1])):
            print(f"{args[0]} did not answer within {float(args[1]):g}s.")
            return 1
    elif command == "wait-nodes" and len(args) == 3:
        return wait_nodes(args[0], int(args[1]), float(args[2]))
    else:
        print("usage: python -m orchestrator.slurm.node address [NODE] | free-port [HOST] | "
              "ray-start head|worker PORT|HEAD:PORT TEMP_DIR | "
              "mlflow-server JOB_DIR HOST PORT BACKEND_URI ARTIFACT_ROOT | wait-http URL TIMEOUT | "
              "wait-nodes HEAD:PORT COUNT TIMEOUT", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

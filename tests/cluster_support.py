"""Real cluster services for tests, all on 127.0.0.1: a private PostgreSQL, an MLflow tracking server backed
by it, and Ray nodes started with `ray start`.

Ray binds to the machine's external address unless that address does not exist, so the tests move into a
fresh network namespace whose only interface is the loopback (`loopback_network_namespace`). Every process is
started here and stopped here by its id; processes that outlive that (Ray's workers) are found by the
namespace they live in, which only processes started inside it share.
"""

from __future__ import annotations

import ctypes
import fcntl
import glob
import os
import pwd
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

CLONE_NEWNET = 0x40000000
BIN = Path(sys.executable).parent  # the venv's console scripts: ray, mlflow, orchestrator


class ServiceError(RuntimeError):
    pass


# --------------------------------------------------------------------------------------------------------------
# Network namespace
# --------------------------------------------------------------------------------------------------------------


def _network_namespace(pid: int | str = "thread-self") -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:  # the process is gone, or not ours to inspect
        return None


def _bring_loopback_up() -> None:
    """`ip link set lo up`, without needing iproute2: set IFF_UP on `lo` through the ioctl interface."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock, siocgifflags, request))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sh", b"lo", flags | iff_up))


def processes_in_namespace(namespace: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid() and _network_namespace(entry) == namespace:
            pids.append(int(entry))
    return pids


@contextmanager
def loopback_network_namespace():
    """Run the calling thread, and every process it starts, in a new network namespace with only `lo` up.

    Namespaces belong to threads: only this (the test's) thread moves, and it moves back on exit. Processes
    still alive in the namespace on exit are killed by id, so nothing started here outlives the test."""
    libc = ctypes.CDLL(None, use_errno=True)
    original = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        if libc.unshare(CLONE_NEWNET) != 0:
            code = ctypes.get_errno()
            raise ServiceError(f"cannot create a network namespace (unshare: {os.strerror(code)}); these tests need "
                               "root or CAP_SYS_ADMIN, e.g. `docker run --cap-add SYS_ADMIN` on CI")
        namespace = _network_namespace()
        try:
            _bring_loopback_up()
            yield namespace
        finally:
            for pid in processes_in_namespace(namespace):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if libc.setns(original, CLONE_NEWNET) != 0:
                code = ctypes.get_errno()
                raise ServiceError(f"cannot return to the original network namespace: {os.strerror(code)}")
    finally:
        os.close(original)


# --------------------------------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------------------------------


class Service:
    """One long-running process in its own session (so its children can be stopped with it), logging to a file."""

    name = "service"

    def __init__(self, log: Path):
        self.log = log
        self.process: subprocess.Popen | None = None

    def _spawn(self, argv: list[str], env: dict | None = None, user: str | None = None) -> None:
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=env, user=user, start_new_session=True)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def log_tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_until(self, ready, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                code = self.process.returncode
                raise ServiceError(f"{self.name} exited with {code} before {what}:\n{self.log_tail()}")
            if ready():
                return
            time.sleep(0.25)
        raise ServiceError(f"{self.name} not {what} after {timeout:.0f}s:\n{self.log_tail()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> None:
        """Signal the process, wait, then kill what is left of its process group."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # the group id is the leader's pid (start_new_session)
        except (ProcessLookupError, PermissionError):
            pass
        self.process = None


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


class Postgres(Service):
    """A private PostgreSQL cluster in `root`, on 127.0.0.1:`port`, with password authentication."""

    name = "PostgreSQL"
    user, password, database = "mlflow", "test-password", "mlflow"

    def __init__(self, root: Path, port: int = 5432):
        super().__init__(root / "postgres.log")
        self.root, self.port = root, port
        self.data = root / "data"
        self.bin = postgres_bin_dir()
        # PostgreSQL refuses to run as root; run it as the system's `postgres` user when we are root.
        self.os_user = "postgres" if os.geteuid() == 0 else None

    @property
    def uri(self) -> str:
        return f"postgresql+psycopg2://{self.user}:{self.password}@127.0.0.1:{self.port}/{self.database}"

    def _as_owner(self, argv: list[str]) -> None:
        result = subprocess.run(argv, capture_output=True, text=True, user=self.os_user, timeout=120,
                                env={**os.environ, "PGPASSWORD": self.password})
        if result.returncode != 0:
            raise ServiceError(f"{' '.join(argv)} failed:\n{result.stdout}{result.stderr}")

    def start(self) -> None:
        fresh = not self.data.exists()
        if fresh:
            self.root.mkdir(parents=True, exist_ok=True)
            if self.os_user:
                owner = pwd.getpwnam(self.os_user)
                os.chown(self.root, owner.pw_uid, owner.pw_gid)
            pwfile = self.root / "pwfile"
            pwfile.write_text(self.password + "\n")
            self._as_owner([str(self.bin / "initdb"), "-D", str(self.data), "-U", self.user, "--pwfile", str(pwfile),
                            "--auth", "scram-sha-256", "-E", "UTF8", "--locale", "C", "--no-sync"])
        # Durability settings off: a test database, and a busy shared machine.
        self._spawn([str(self.bin / "postgres"), "-D", str(self.data), "-h", "127.0.0.1", "-p", str(self.port),
                     "-k", str(self.root), "-c", "fsync=off", "-c", "synchronous_commit=off",
                     "-c", "full_page_writes=off", "-c", "max_connections=30"], user=self.os_user)
        self.wait_until(lambda: _port_open(self.port), "accepting connections", 60)
        if fresh:
            self._as_owner([str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user,
                            self.database])

    def stop(self, sig: int = signal.SIGINT, timeout: float = 30.0) -> None:  # SIGINT: PostgreSQL's fast shutdown
        super().stop(sig, timeout)


def postgres_bin_dir() -> Path:
    """Debian keeps the server binaries in /usr/lib/postgresql/<version>/bin, outside PATH."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(Path(p).parts[4]))
    if candidates:
        return Path(candidates[-1]).parent
    found = shutil.which("postgres")
    if found:
        return Path(found).parent
    raise ServiceError("PostgreSQL's server is not installed: apt-get install -y postgresql")


class MlflowServer(Service):
    """`mlflow server` on 127.0.0.1:`port`: a backend store URI, artifacts served from a local folder."""

    name = "MLflow server"

    def __init__(self, backend_uri: str, root: Path, port: int = 5000):
        super().__init__(root / "mlflow-server.log")
        self.backend_uri, self.root, self.port = backend_uri, root, port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def start(self, timeout: float = 180.0) -> None:
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true",
               # The URI carries the password; the environment keeps it out of the process list.
               "MLFLOW_BACKEND_STORE_URI": self.backend_uri}
        self._spawn([str(BIN / "mlflow"), "server", "--artifacts-destination", str(self.root / "artifacts"),
                     "--serve-artifacts", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1"], env=env)
        # The first start creates the schema (dozens of migrations): the slow part.
        self.wait_until(self.healthy, "healthy", timeout)


class RayNode(Service):
    """`ray start --block` for a head or a worker, each with one CPU and a custom resource naming it."""

    def __init__(self, root: Path, env: dict, head_port: int = 6379, head: bool = True):
        self.head = head
        self.name = "Ray head" if head else "Ray worker"
        super().__init__(root / ("ray-head.log" if head else "ray-worker.log"))
        self.env, self.head_port, self.root = env, head_port, root

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.head_port}"

    def start(self, timeout: float = 120.0) -> None:
        role = "head" if self.head else "worker"
        argv = [str(BIN / "ray"), "start", "--block", "--node-ip-address", "127.0.0.1", "--num-cpus", "1",
                "--num-gpus", "0", "--resources", f'{{"{role}": 1}}', "--object-store-memory", str(100 * 2**20),
                "--disable-usage-stats"]
        if self.head:
            argv += ["--head", "--port", str(self.head_port), "--include-dashboard", "false",
                     "--temp-dir", str(self.root / "ray")]
        else:
            argv += ["--address", self.address]
        self._spawn(argv, env=self.env)
        # Printed once the node's raylet has registered with the cluster.
        self.wait_until(lambda: "Ray runtime started." in self.log.read_text(errors="replace"), "started", timeout)


def cluster_env(root: Path, token: str) -> dict:
    """The environment every Ray process (head, worker, driver) shares: the same token authentication, and a
    private HOME and TMPDIR so that nothing lands in (or is read from) the machine's ~/.ray or /tmp/ray."""
    home, tmp = root / "home", root / "tmp"
    home.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "HOME": str(home), "TMPDIR": str(tmp), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token,
            "RAY_USAGE_STATS_ENABLED": "0", "MLFLOW_DISABLE_TELEMETRY": "true"}


def finish(process: subprocess.Popen, timeout: float) -> str:
    """The output of an orchestrator process; the test fails, the process killed, if it runs past `timeout`."""
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        pytest.fail(f"orchestrator still running after {timeout:.0f}s:\n{output[-4000:]}", pytrace=False)
    return output

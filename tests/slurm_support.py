"""A real SLURM for tests, on this machine: `munged` with its own key and socket, `slurmctld` and one `slurmd`
per node, all from one private `slurm.conf` (private ports, private state and spool folders), run as root
without systemd or cgroups (`ProctrackType=proctrack/linuxproc`, `TaskPlugin=task/none`). Start it inside
`cluster_support.loopback_network_namespace()`: every daemon listens on 127.0.0.1 only, and is stopped by
its process id (cluster_support.Service).

Two SLURM nodes on one machine: Debian's SLURM (22.05) is not built with `--enable-multiple-slurmd`, but it
honours a per-node `Port=` on the NodeName lines, which is all two `slurmd -N NODE` on one host need (with the
one SlurmdPort, the second fails: "Address already in use"); `%n` in the spool, pid and log paths keeps their
files apart. The nodes' addresses are 127.0.0.11 and 127.0.0.12 (the loopback answers all of 127/8): not
127.0.0.1, which `ray start --address 127.0.0.1:PORT` on a worker replaces by that worker's own address.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import socket
import struct
import subprocess
import time
from pathlib import Path

from cluster_support import Service, ServiceError

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scontrol", "squeue", "scancel", "srun")
INSTALL_HINT = "apt-get install -y --no-install-recommends slurm-wlm munge"


def require_slurm() -> None:
    """Fail (never skip) with the install hint where SLURM or munge is missing: `.ci/run` installs them."""
    missing = [name for name in DAEMONS if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]
    if missing:
        raise ServiceError(f"SLURM is not installed ({', '.join(missing)} missing): {INSTALL_HINT}")


def add_loopback_alias(address: str = "127.0.0.2") -> None:
    """`ifconfig lo:1 ADDRESS`, through the ioctl interface. SLURM's daemons resolve names with AI_ADDRCONFIG,
    which glibc answers only where some IPv4 address other than 127.0.0.1 is configured: in a namespace that
    has only the loopback, every lookup fails ("Unable to resolve") until a second loopback address exists."""
    siocsifaddr = 0x8916
    sockaddr = struct.pack("HH4s8x", socket.AF_INET, 0, socket.inet_aton(address))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        fcntl.ioctl(sock, siocsifaddr, struct.pack("16s16s", b"lo:1", sockaddr))


def node_address(number: int) -> str:
    """Node N's address, 127.0.0.1N (see the module's docstring)."""
    return f"127.0.0.{10 + number}"


def _binary(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Munge(Service):
    name = "munged"

    def __init__(self, root: Path):
        super().__init__(root / "munged.out")
        self.root = root
        self.socket = root / "munge.socket"

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o700)
        key = self.root / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        self._spawn([_binary("munged"), "--foreground", "--force", f"--socket={self.socket}", f"--key-file={key}",
                     f"--log-file={self.root / 'munged.log'}", f"--pid-file={self.root / 'munged.pid'}",
                     f"--seed-file={self.root / 'munged.seed'}"])
        self.wait_until(self.socket.exists, "listening", 30)


class SlurmDaemon(Service):
    def __init__(self, root: Path, name: str, argv: list[str], env: dict):
        super().__init__(root / f"{name}.out")
        self.name, self.argv, self.env = name, argv, env

    def start(self, ready, timeout: float = 60.0) -> None:
        self._spawn(self.argv, env=self.env)
        self.wait_until(ready, "ready", timeout)


class Slurm:
    """munged + slurmctld + one slurmd per node on the loopback: `nodes` nodes (1 or 2) of `cpus` CPUs each."""

    def __init__(self, root: Path, nodes: int = 2, cpus: int = 1):
        assert nodes in (1, 2), "one machine makes at most two SLURM nodes here (see the module's docstring)"
        self.root, self.cpus = root, cpus
        self.host = socket.gethostname()
        self.nodes = [f"node{number}" for number in range(1, nodes + 1)]
        self.ports = [_free_port() for _ in self.nodes]
        self.conf = root / "slurm.conf"
        self.munge = Munge(root / "munge")
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.daemons: list[Service] = []

    def _node_line(self, number: int) -> str:
        return (f"NodeName=node{number} NodeHostname={self.host} NodeAddr={node_address(number)} "
                f"Port={self.ports[number - 1]} CPUs={self.cpus} RealMemory=2048 State=UNKNOWN")

    def write_conf(self) -> None:
        for folder in ("state", "log", *(f"spool-{node}" for node in self.nodes)):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        nodes = "\n".join(self._node_line(number) for number in range(1, len(self.nodes) + 1))
        self.conf.write_text(f"""ClusterName=orchestratortest
SlurmctldHost={self.host}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge.socket}
StateSaveLocation={self.root / 'state'}
SlurmdSpoolDir={self.root / 'spool-%n'}
SlurmctldPidFile={self.root / 'slurmctld.pid'}
SlurmdPidFile={self.root / 'slurmd-%n.pid'}
SlurmctldLogFile={self.root / 'log' / 'slurmctld.log'}
SlurmdLogFile={self.root / 'log' / 'slurmd-%n.log'}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
KillWait=30
MessageTimeout=30
MinJobAge=300
SlurmdTimeout=60
{nodes}
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")

    def _slurmd_argv(self, number: int) -> list[str]:
        argv = [_binary("slurmd"), "-D", "-N", f"node{number}", "-f", str(self.conf)]
        return argv

    def start(self) -> None:
        require_slurm()
        add_loopback_alias()
        self.root.mkdir(parents=True, exist_ok=True)
        self.write_conf()
        self.munge.start()
        self.daemons.append(self.munge)
        ctld = SlurmDaemon(self.root, "slurmctld", [_binary("slurmctld"), "-D", "-i", "-f", str(self.conf)], self.env)
        self.daemons.append(ctld)
        ctld.start(lambda: self.scontrol("ping").returncode == 0)
        for number in range(1, len(self.nodes) + 1):
            slurmd = SlurmDaemon(self.root, f"slurmd-node{number}", self._slurmd_argv(number), self.env)
            self.daemons.append(slurmd)
            slurmd.start(lambda name=f"node{number}": self.node_idle(name))

    def stop(self) -> None:
        for daemon in reversed(self.daemons):
            daemon.stop()
        self.daemons.clear()

    def run(self, *argv: str, timeout: float = 60, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), capture_output=True, text=True, env={**self.env, **(env or {})},
                              timeout=timeout)

    def scontrol(self, *args: str) -> subprocess.CompletedProcess:
        return self.run(_binary("scontrol"), *args)

    def node_idle(self, node: str) -> bool:
        return re.search(r"State=IDLE\b", self.scontrol("show", "node", node).stdout) is not None

    def job_state(self, job_id: str) -> str:
        found = re.search(r"JobState=(\S+)", self.scontrol("show", "job", job_id).stdout)
        return found.group(1) if found else "UNKNOWN"

    def wait_job(self, job_id: str, states: set[str], timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.job_state(job_id)
            if state in states:
                return state
            time.sleep(0.5)
        raise ServiceError(f"job {job_id} still {self.job_state(job_id)} after {timeout:.0f}s")

    def logs(self) -> str:
        return "\n".join(f"--- {path.name}\n" + path.read_text(errors="replace")[-3000:]
                         for path in sorted((self.root / "log").glob("*.log")))

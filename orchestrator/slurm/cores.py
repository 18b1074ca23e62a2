"""How many CPU cores a node of the job has, so that the job never asks a node for more CPUs than it has (SLURM
would hold such a job pending for ever): `--node-cores` where given; else SLURM's own word, `sinfo`'s CPU count of
the partition's nodes (the smallest, where they differ), when `sinfo` answers; else DEFAULT_NODE_CORES, the
common GPU node's 64, said as an assumption in the job's summary."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_NODE_CORES = 64  # the common 8-GPU node's cores: assumed where neither --node-cores nor sinfo says
SINFO_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class NodeCores:
    """A node's CPU cores and where the number comes from: "--node-cores", "sinfo" or "default"."""

    count: int
    source: str

    @property
    def known(self) -> bool:
        """Said by the user or by SLURM (a request above it is refused), not assumed (it is then capped, warned)."""
        return self.source != "default"

    def words(self) -> str:
        if self.source == "default":
            return (f"{self.count} cores, assumed (sinfo did not answer; give the nodes' cores with --node-cores, "
                    f"default {DEFAULT_NODE_CORES})")
        return f"{self.count} cores ({self.source})"


def sinfo_cores(text: str) -> int | None:
    """The smallest CPU count of `sinfo --noheader --format=%c` lines ("64", "128+", ...); None for none."""
    counts = [int(found) for found in re.findall(r"^\s*(\d+)\+?\s*$", text, re.M)]
    return min(counts) if counts else None


def _ask_sinfo(partition: str | None, runner: Callable = subprocess.run) -> int | None:
    command = ["sinfo", "--noheader", "--format=%c", *(["--partition", partition] if partition else [])]
    try:
        done = runner(command, capture_output=True, text=True, timeout=SINFO_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):  # no SLURM here, or it does not answer in time
        return None
    return sinfo_cores(done.stdout) if done.returncode == 0 else None


def node_cores(flag: int | None, partition: str | None, runner: Callable = subprocess.run) -> NodeCores:
    """The job's nodes' cores: the flag, else sinfo's (of `partition`, else of every partition), else the default."""
    if flag is not None:
        return NodeCores(flag, "--node-cores")
    found = _ask_sinfo(partition, runner)
    if found is not None:
        return NodeCores(found, f"sinfo{f' --partition {partition}' if partition else ''}")
    return NodeCores(DEFAULT_NODE_CORES, "default")

"""A study's SLURM job: what it asks SLURM for, with defaults from the study, and whether that is enough.

The largest trial decides the GPUs: a trial of `workers` workers with `resources.gpus` GPUs each needs
workers x gpus GPUs at once (Ray Train reserves them together, on as few nodes as hold them), and each of
its workers one node with `resources.gpus` GPUs and `resources.cpus` CPUs. The default job is one node with
enough GPUs for that trial, and CPUs for the trial workers the study runs at once (all its trials, or
`resources.max_concurrent` of them: sizing.py), as many as the node's GPUs hold, plus one for the driver (Ray
Tune and the MLflow server on the first node), never more than a node's cores (cores.py: --node-cores, else
sinfo, else 64; where capped, the driver shares the cores with the trial workers). Asking for more GPUs runs
more trials at once. What the job asks for is checked against the largest trial and the nodes' cores before
anything is submitted (`problems`).
"""

from __future__ import annotations

import math
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .cores import NodeCores

DEFAULT_JOIN_TIMEOUT_S = 300.0
DEFAULT_SIGNAL_GRACE_S = 120  # SIGTERM this long before the time limit (sbatch --signal)


@dataclass(frozen=True)
class LargestTrial:
    label: str
    workers: int
    gpus_per_worker: float
    cpus_per_worker: float

    @property
    def gpus(self) -> float:
        return self.workers * self.gpus_per_worker


def largest_trial(study) -> LargestTrial:
    """The study's trial that takes the most GPUs at once (then the most workers)."""
    from ..trial.trials import expand

    resources = study.resources
    biggest = max(expand(study), key=lambda trial: (trial.workers * resources.gpus, trial.workers))
    return LargestTrial(biggest.run_name, biggest.workers, resources.gpus, resources.cpus)


@dataclass
class JobRequest:
    """What the job asks SLURM for; None: the default from the largest trial (`complete`)."""

    nodes: int = 1
    gpus_per_node: int | None = None
    cpus_per_node: int | None = None
    partition: str | None = None
    account: str | None = None
    time: str | None = None
    sbatch_lines: list[str] = field(default_factory=list)  # extra #SBATCH options, e.g. "--qos=high"
    setup: list[str] | None = None  # shell lines that make `python` the project's (venv, modules)
    join_timeout: float = DEFAULT_JOIN_TIMEOUT_S
    signal_grace: int = DEFAULT_SIGNAL_GRACE_S
    requeue: bool = False
    node_cores: "NodeCores | None" = None  # a node's CPU cores (cores.py): the default CPUs never exceed them
    wanted_cpus: int | None = None  # set by `complete` where the node's cores capped the default CPUs: what it wanted

    def complete(self, largest: LargestTrial, workers_at_once: int | None = None) -> "JobRequest":
        """This request with every default filled in: GPUs for the largest trial; CPUs for the trial workers
        that run at once (`workers_at_once`, the study's concurrency: sizing.py; default the largest trial's)
        spread over the nodes, no more than a node's GPUs hold, at least the largest trial's share of a node,
        plus one for the driver."""
        gpus = self.gpus_per_node
        if gpus is None:
            gpus = max(math.ceil(largest.gpus / self.nodes), math.ceil(largest.gpus_per_worker)) \
                if largest.gpus_per_worker else 0
        cpus, wanted = self.cpus_per_node, None
        if cpus is None:
            per_node = math.ceil(max(workers_at_once or largest.workers, 1) / self.nodes)
            if largest.gpus_per_worker:
                per_node = min(per_node, math.floor(gpus / largest.gpus_per_worker))
            per_node = max(per_node, math.ceil(largest.workers / self.nodes), 1)
            cpus = math.ceil(largest.cpus_per_worker * per_node) + 1  # + the driver on the first node
            if self.node_cores is not None and cpus > self.node_cores.count:  # never more than a node has
                cpus, wanted = self.node_cores.count, cpus
        setup = self.setup if self.setup is not None else default_setup()
        return JobRequest(self.nodes, gpus, cpus, self.partition, self.account, self.time, list(self.sbatch_lines),
                          setup, self.join_timeout, self.signal_grace, self.requeue, self.node_cores, wanted)


def problems(request: JobRequest, largest: LargestTrial) -> list[str]:
    """Why a completed request cannot run the largest trial (empty: it can), with the numbers."""
    found = []
    total = request.nodes * (request.gpus_per_node or 0)
    if largest.gpus > total:
        need = math.ceil(largest.gpus)
        found.append(f"the largest trial ({largest.label}) needs {largest.workers} worker(s) x "
                     f"{largest.gpus_per_worker:g} GPU = {largest.gpus:g} GPU(s) at once, but the job asks for "
                     f"{request.nodes} node(s) x {request.gpus_per_node or 0} GPU(s) = {total}: ask for "
                     f"--gpus-per-node {math.ceil(need / request.nodes)} (or more --nodes)")
    if largest.gpus_per_worker > (request.gpus_per_node or 0) and largest.gpus <= total:
        found.append(f"each worker needs {largest.gpus_per_worker:g} GPU(s) on one node, but a node of the job has "
                     f"{request.gpus_per_node}")
    cores = request.node_cores
    if cores is not None and cores.known and (request.cpus_per_node or 0) > cores.count:
        found.append(f"the job asks for {request.cpus_per_node} CPUs per node, but its nodes have {cores.words()}: "
                     f"SLURM would never schedule it; ask for --cpus-per-node {cores.count} or fewer")
    elif largest.cpus_per_worker > (request.cpus_per_node or 0):
        found.append(f"each worker needs {largest.cpus_per_worker:g} CPU(s) on one node (resources.cpus), but a "
                     f"node of the job has {request.cpus_per_node}: ask for --cpus-per-node "
                     f"{math.ceil(largest.cpus_per_worker)}")
    return found


def default_setup() -> list[str]:
    """Activate this Python's virtual environment on the nodes (the same path on a shared file system)."""
    prefix = Path(sys.prefix)
    if (prefix / "bin" / "activate").is_file() and sys.prefix != sys.base_prefix:
        return [f". {shlex.quote(str(prefix / 'bin' / 'activate'))}"]
    return [f"export PATH={shlex.quote(str(Path(sys.executable).parent))}:\"$PATH\""]

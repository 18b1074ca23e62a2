"""What a study's SLURM job will do with what it asks for, said before anything is submitted.

`orchestrator slurm` prints this first (`summary`): the trials to run, the GPUs and CPUs each takes, how many
run at once (and per node), the plan's estimated wall time of the study at that concurrency against the
job's `--time`, and warnings where the time limit will cut the study (it then stops cleanly and resumes when
resubmitted) or the job asks for GPUs its trials will not use. It also gives the default CPUs per node the
study's concurrency (`StudyWork.workers_at_once`; job.py's `complete` makes it CPUs), so that a CPU study's
trials run side by side rather than one at a time.

The store is read only where it is a SQLite file (read-only, without MLflow: tracking/readers.py), for the
trials it finished and the measured ms per step; a tracking server is not asked (a login node may not reach
it), and the estimate is then the analytic one for every trial.

How many trials run at once: Ray gives every trial worker `resources.cpus` CPUs and `resources.gpus` GPUs of
one node, and each node offers Ray all the CPUs and GPUs SLURM granted it; `resources.max_concurrent` caps the
count. The wall time: the plan's estimate of each trial to run (`orchestrator plan`: the store's measured ms
per step where it has the shape, else analytic; training and evaluation, no start-up), scheduled
longest first onto that many slots, which is the order the driver starts them (planning/schedule.py).
"""

from __future__ import annotations

import heapq
import math
import re
from dataclasses import dataclass

from ..planning.plan_table import duration  # one way of saying a duration, the plan's
from .job import JobRequest, LargestTrial, largest_trial


class TimeLimitError(ValueError):
    """A --time SLURM would not take."""


_TIME = re.compile(r"^(?:(?P<days>\d+)-)?(?P<rest>\d+(?::\d+){0,2})$")


def time_limit_seconds(text: str | None) -> float | None:
    """SLURM's time formats (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS) in seconds; None for no
    limit given (the partition's default) or UNLIMITED / infinite."""
    if text is None or text.strip().lower() in ("unlimited", "infinite", "-1"):
        return None
    found = _TIME.match(text.strip())
    if not found:
        raise TimeLimitError(f"--time {text!r} is not a SLURM time limit: use minutes, MM:SS, HH:MM:SS, D-HH, "
                             "D-HH:MM or D-HH:MM:SS (e.g. 1-00:00:00 for a day)")
    parts = [int(part) for part in found.group("rest").split(":")]
    if found.group("days") is not None:  # D-HH[:MM[:SS]]
        hours, minutes, seconds = (parts + [0, 0])[:3]
        return float(int(found.group("days")) * 86400 + hours * 3600 + minutes * 60 + seconds)
    if len(parts) == 1:
        return parts[0] * 60.0  # minutes
    if len(parts) == 2:
        return parts[0] * 60.0 + parts[1]  # MM:SS
    return parts[0] * 3600.0 + parts[1] * 60 + parts[2]


@dataclass(frozen=True)
class StudyWork:
    """The trials a job would run: each trial's workers and estimated training seconds (finished ones left out)."""

    trials: list[tuple[int, float]]  # (workers, estimated seconds) of each trial to run
    finished: int  # trials the store has finished: skipped by the job
    measured: int  # estimates from the store's measured steps (the rest analytic)
    cpus_per_worker: float
    gpus_per_worker: float
    max_concurrent: int | None

    @property
    def workers_at_once(self) -> int:
        """The workers of the trials that may run at once: all of them, or the largest max_concurrent ones."""
        sizes = sorted((workers for workers, _ in self.trials), reverse=True)
        return sum(sizes[:self.max_concurrent] if self.max_concurrent else sizes)


def study_work(study, measured=None, finished_ids: set[str] | frozenset = frozenset()) -> StudyWork:
    """The plan's rows of the study (planning/plan_view.py) as the job sees them: a row that shares another's
    trial costs nothing, a finished one is skipped; each trial lasts its training and its evaluation."""
    from ..planning.plan_view import plan_rows

    rows = plan_rows(study, measured, set(finished_ids))
    to_run = [row for row in rows if row.status == "to run"]
    return StudyWork([(row.cost.workers, row.total) for row in to_run],
                     sum(row.status == "finished" for row in rows),
                     sum(row.basis.startswith("measured") for row in to_run),
                     study.resources.cpus, study.resources.gpus, study.resources.max_concurrent)


def worker_slots(request: JobRequest, work: StudyWork) -> int:
    """Trial workers a node of the job holds at once (Ray: its CPUs and GPUs over one worker's)."""
    slots = math.floor((request.cpus_per_node or 0) / work.cpus_per_worker)
    if work.gpus_per_worker:
        slots = min(slots, math.floor((request.gpus_per_node or 0) / work.gpus_per_worker))
    return max(slots, 0)


def trials_at_once(request: JobRequest, work: StudyWork) -> int:
    """How many of the study's trials run at the same time in the job."""
    if not work.trials:
        return 0
    widest = max(workers for workers, _ in work.trials)
    at_once = (request.nodes * worker_slots(request, work)) // widest
    if work.max_concurrent:
        at_once = min(at_once, work.max_concurrent)
    return max(1, min(at_once, len(work.trials)))


def wall_seconds(seconds: list[float], slots: int) -> float:
    """The longest-first schedule of these durations onto `slots` parallel slots: when the last one ends."""
    ends = [0.0] * max(1, slots)
    for length in sorted(seconds, reverse=True):
        heapq.heappush(ends, heapq.heappop(ends) + length)
    return max(ends)




@dataclass(frozen=True)
class Summary:
    lines: list[str]
    warnings: list[str]


def summary(request: JobRequest, work: StudyWork, study_name: str) -> Summary:
    """What the job will do, in a few lines, and what to reconsider (warnings), before anything is submitted."""
    gpus = f"{work.gpus_per_worker:g} GPU" if work.gpus_per_worker else "no GPU"
    widths = sorted({workers for workers, _ in work.trials})
    workers = (f"{widths[0]} worker(s)" if len(widths) == 1 else f"{widths[0]}-{widths[-1]} workers") if widths else ""
    lines = [f"Study {study_name}: {len(work.trials)} trial(s) to run"
             + (f" ({work.finished} finished in the store: skipped)" if work.finished else "")
             + (f"; each {workers} x ({work.cpus_per_worker:g} CPU, {gpus})" if widths else "")]
    warnings: list[str] = []
    at_once = trials_at_once(request, work)
    slots = worker_slots(request, work)
    node_gpus = f"{request.gpus_per_node} GPU(s)" if request.gpus_per_node else "no GPU"
    lines.append(f"Job: {request.nodes} node(s) x ({request.cpus_per_node} CPUs, {node_gpus}): {at_once} trial(s) at "
                 f"once, {slots} trial worker(s) per node"
                 + (f" (resources.max_concurrent: {work.max_concurrent})" if work.max_concurrent else ""))
    cores = request.node_cores
    if request.wanted_cpus is not None and cores is not None:
        lines.append(f"CPUs per node: {request.cpus_per_node}, a node's {cores.words()}, not the "
                     f"{request.wanted_cpus} its trial workers and the driver would take: the driver shares them")
    if cores is not None and not cores.known and (request.cpus_per_node or 0) > cores.count:
        warnings.append(f"the job asks for {request.cpus_per_node} CPUs per node, more than the {cores.count} cores "
                        "assumed of a node: SLURM holds it pending where its nodes have fewer; give --node-cores")
    total_gpus = request.nodes * (request.gpus_per_node or 0)
    if total_gpus and not work.gpus_per_worker:
        warnings.append(f"the job asks for {total_gpus} GPU(s) but the study's trials use none (resources.gpus is 0): "
                        "they would sit idle; leave out --gpus-per-node, or give the trials GPUs with "
                        "resources.gpus=1")
    elif total_gpus and work.trials:
        widest = max(workers for workers, _ in work.trials)
        used = math.ceil(at_once * widest * work.gpus_per_worker)
        if used < total_gpus:
            warnings.append(f"at most {used} of the job's {total_gpus} GPU(s) are used at once ({at_once} trial(s) of "
                            f"up to {widest} worker(s) x {work.gpus_per_worker:g} GPU"
                            + (", resources.max_concurrent" if work.max_concurrent and at_once == work.max_concurrent
                               else "") + "): ask for fewer GPUs, or let more trials run at once")
    if work.trials:
        wall = wall_seconds([seconds for _, seconds in work.trials], at_once)
        serial = sum(seconds for _, seconds in work.trials)
        limit = time_limit_seconds(request.time)
        against = (f"--time {request.time} ({duration(limit)})" if limit is not None
                   else "no --time: the partition's default limit")
        lines.append(f"Estimated time: {duration(wall)} with {at_once} at once (one at a time: "
                     f"{duration(serial)}; the plan's estimate, {work.measured} of {len(work.trials)} measured in the "
                     f"store, training and evaluation); {against}")
        usable = limit - request.signal_grace if limit is not None else None
        if usable is not None and wall > usable:
            warnings.append(f"the time limit will cut the study: about {duration(wall)} of trials against "
                            f"{duration(max(usable, 0))} before the job is asked to stop (--time less --signal-grace); "
                            "it stops cleanly and resumes when the script is submitted again"
                            + (" (by itself with --requeue)" if not request.requeue else " (--requeue requeues it)")
                            + ", or ask for more --time, --nodes or GPUs")
    return Summary(lines, warnings)


def stored_facts(tracking_uri: str, study_name: str):
    """(measured ms per step, ids of the study's finished trials) from a SQLite store; (None, empty) for any
    other store, one not made yet, or one that cannot be read now."""
    from ..tracking.uri import sqlite_path

    path = sqlite_path(tracking_uri)
    if path is None or not path.is_file():
        return None, set()
    from ..planning.learned import load_measured
    from ..tracking.readers import SQLiteReader
    from ..tracking.store import ROLE_TAG, TRIAL_ID_TAG

    try:
        reader = SQLiteReader(path)
        found = reader.experiment(study_name)
        runs = reader.runs(found[0], ROLE_TAG, "trial") if found else []
        finished = {run.data.tags[TRIAL_ID_TAG] for run in runs
                    if run.info.status == "FINISHED" and TRIAL_ID_TAG in run.data.tags}
        return load_measured(tracking_uri), finished
    except Exception:  # locked, another schema, being written by a running job: estimate without it
        return None, set()


def size_job(study, request: JobRequest, tracking_uri: str) -> tuple[JobRequest, LargestTrial, Summary]:
    """The request with its defaults (the CPUs the study's concurrency needs), the largest trial (for job.py's
    `problems`), and the summary printed before anything is submitted."""
    largest = largest_trial(study)
    work = study_work(study, *stored_facts(tracking_uri, study.name))
    completed = request.complete(largest, work.workers_at_once)
    return completed, largest, summary(completed, work, study.name)

"""Evaluations are leased like training: two `orchestrator evaluate` of one store score each (run, length) once.

Each unit of work is leased in the study's store through the same lease book as the trials
(tracking/leases.py): `evaluate.<run id>.<length><metric suffix>` for a length, `.time` for the isolated
timing, `.visualise` for the heat maps. A unit another live command holds is left to it, and said so; a unit
leased here is looked up again in the store first, since the other command may have recorded it between this
one's plan and its lease (it records, then gives the lease back). The lease of a command killed with
SIGKILL lapses as a trial's does (at once on the same machine, after the expiry elsewhere), and what it had
not recorded is missing from the run, so the next command scores it: a recording is one transaction
(runner.record), never half-written.
"""

from __future__ import annotations

from typing import Callable

import dape_core.metric_names as names

from ..tracking.leases import LeaseBook
from ..tracking.store import StudyStore
from .request import EvalRequest, TrialTask, timed

TIME, VISUALISE = "time", "visualise"


def _key(task: TrialTask, unit: str) -> str:
    return f"evaluate.{task.run_id}.{unit}"


def _metric(task: TrialTask, length: int) -> str:
    return names.per_length(names.ACC, length) if task.che else names.per_length(names.PPL, length) + task.suffix


def units(task: TrialTask) -> dict[str, object]:
    """The task's lease keys, each with what it covers (a length, TIME or VISUALISE)."""
    found: dict[str, object] = {_key(task, f"{length}{task.suffix}"): length for length in task.lengths}
    if task.time:
        found[_key(task, TIME)] = TIME
    if task.visualise:
        found[_key(task, VISUALISE)] = VISUALISE
    return found


def lease_tasks(tasks: list[TrialTask], leases: LeaseBook, store: StudyStore, request: EvalRequest,
                say: Callable[[str], None]) -> list[TrialTask]:
    """The tasks narrowed to the units leased here and still missing from the store; the rest is given back
    (or left to the command holding it)."""
    if not tasks:
        return []
    wanted = {task.run_id: units(task) for task in tasks}
    blocked = leases.acquire({key for keys in wanted.values() for key in keys})
    redo = request.again and bool(request.lengths)
    metrics = {run.info.run_id: run.data.metrics for run in store.trial_runs()}
    kept, done_meanwhile = [], 0
    for task in tasks:
        keys = wanted[task.run_id]
        now = metrics.get(task.run_id, {})
        gone = {key for key, unit in keys.items() if key in blocked or (
            not redo and isinstance(unit, int) and _metric(task, unit) in now) or (
            unit == TIME and not request.again and timed(now))}
        done_meanwhile += len({key for key in gone if key not in blocked})
        task.lengths = [length for length in task.lengths if _key(task, f"{length}{task.suffix}") not in gone]
        task.time = task.time and _key(task, TIME) not in gone
        task.visualise = task.visualise and _key(task, VISUALISE) not in gone
        leases.release(gone - set(blocked))
        if task.lengths or task.time or task.visualise:
            kept.append(task)
    if blocked:
        who = sorted({str(holder) for holder in blocked.values() if holder is not None}) or ["another command"]
        say(f"{len(blocked)} (run, length) evaluation(s) are being done by another orchestrator ({', '.join(who)}): "
            "left to it, their values go into the same runs; run the same command afterwards for any it did not "
            "finish")
    if done_meanwhile:
        say(f"{done_meanwhile} (run, length) evaluation(s) were recorded by another orchestrator meanwhile: skipped")
    return kept


def release_task(leases: LeaseBook, task: TrialTask) -> None:
    """Give back a task's units once its values are recorded (or it failed: another command may retry)."""
    leases.release(set(units(task)))

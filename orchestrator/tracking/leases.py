"""Leases: which orchestrator is running which trial, kept in the study's own tracking store.

Two `orchestrator run` of one study at once (two terminals, a scheduler that retries a job) must not train a
trial twice, share its checkpoint, or close each other's live runs as stale. Each orchestrator keeps one
lease run in the study's experiment (tag `orchestrator.role` = `lease`), tagged `holds.<trial id>` for every
trial it runs, with a heartbeat it refreshes every `heartbeat_s` seconds; the run is deleted when it is done.
The store is the one thing all orchestrators of a study share, on one machine (SQLite) or many (a server).
Every study's leases are read: two studies of one store share the trials of one identity (the same config and
code is the same trial, reused across studies), so two studies running at once train such a trial once.

Claiming is "publish, then look": an orchestrator adds the trials it wants to its lease, then reads every
other live lease, and gives back any trial another one also holds. Of two orchestrators claiming one trial,
whichever looks second sees the first's claim, so two never both keep it; when both look at once, both give
it back and try again after a random pause. This needs no compare-and-set, which MLflow does not offer.

Per trial rather than one lock per study: two runs whose trials only partly overlap (a study extended by an
axis, another profile) share the work; the second waits only for the trials the first holds (`runner.py`).

A lease is live while its heartbeat is younger than `expiry_s` and, where it was taken on this machine, while
its process exists: the lease of an orchestrator killed with SIGKILL is taken over at once by the next run on
the same machine, and after `expiry_s` from another machine (whose clock must agree to well within that).
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .store import ROLE_TAG, STUDY_TAG, StudyStore

LEASE_ROLE = "lease"
HOLDS_PREFIX = "holds."
HOST_TAG, PID_TAG, STARTED_TAG, HEARTBEAT_TAG = ("orchestrator.lease.host", "orchestrator.lease.pid",
                                                 "orchestrator.lease.process_start", "orchestrator.lease.heartbeat")
HEARTBEAT_S = 10.0
EXPIRY_S = 90.0

_log = logging.getLogger(__name__)


def process_start(pid: int) -> str:
    """When the process started (clock ticks since boot, Linux), so that a reused pid is not taken for it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2:].split()[19]
    except (OSError, ValueError, IndexError):
        return ""


@dataclass(frozen=True)
class Holder:
    """Another orchestrator's lease, as read from the store."""

    run_id: str
    host: str
    pid: int
    started: str
    heartbeat: float
    trials: frozenset[str]

    def __str__(self) -> str:
        return f"pid {self.pid} on {self.host}"

    def alive(self, expiry_s: float, now: float | None = None) -> bool:
        if (now or time.time()) - self.heartbeat > expiry_s:
            return False
        if self.host == socket.gethostname():  # on this machine the process itself can be asked
            return process_start(self.pid) == self.started if self.started else _pid_exists(self.pid)
        return True

    @classmethod
    def from_run(cls, run) -> "Holder":
        tags = run.data.tags
        return cls(run_id=run.info.run_id, host=tags.get(HOST_TAG, "?"), pid=int(tags.get(PID_TAG, 0) or 0),
                   started=tags.get(STARTED_TAG, ""), heartbeat=float(tags.get(HEARTBEAT_TAG, 0) or 0),
                   trials=frozenset(key[len(HOLDS_PREFIX):] for key in tags if key.startswith(HOLDS_PREFIX)))


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LeaseBook:
    """This orchestrator's leases on a study's trials. Use as a context manager: leaving it stops the
    heartbeat and gives every lease back."""

    def __init__(self, store: StudyStore, heartbeat_s: float = HEARTBEAT_S, expiry_s: float = EXPIRY_S,
                 attempts: int = 6):
        self.store, self.heartbeat_s, self.expiry_s, self.attempts = store, heartbeat_s, expiry_s, attempts
        self.held: set[str] = set()
        self.taken_over: set[str] = set()  # trials whose previous holder had died
        self.run_id: str | None = None
        self._stop = threading.Event()
        self._beating: threading.Thread | None = None

    # --- claiming ----------------------------------------------------------------------------------------
    def acquire(self, trial_ids: set[str]) -> dict[str, Holder | None]:
        """Lease what can be leased of `trial_ids` (added to `held`); returns the others, each with the live
        orchestrator holding it (None: still contested after every attempt, treat as held)."""
        wanted = set(trial_ids) - self.held
        blocked: dict[str, Holder | None] = {}
        for attempt in range(self.attempts):
            blocked = dict(_holding(wanted, self.others()))  # typed to take the contested (None) below
            free = wanted - blocked.keys()
            if not free:
                break
            self._publish(free)
            contested = set(_holding(free, self.others()))
            if contested:
                self._withdraw(contested)
            self.held |= free - contested
            wanted = contested
            if not contested:
                break
            blocked.update(dict.fromkeys(contested))
            time.sleep(random.uniform(0.2, 1.0 + attempt))
        return blocked

    def others(self) -> list[Holder]:
        """The other live leases of the store's studies; leases of dead orchestrators are deleted on the way (their
        trials are then free) and remembered in `taken_over`."""
        live = []
        # Every study's leases: two studies of one store share the trials of one identity (issue 43).
        for run in self.store.client.search_runs(self.store.study_experiment_ids(),
                                                 filter_string=f"tags.`{ROLE_TAG}` = '{LEASE_ROLE}'",
                                                 max_results=1000):
            if run.info.run_id == self.run_id:
                continue
            holder = Holder.from_run(run)
            if holder.alive(self.expiry_s):
                live.append(holder)
            else:
                self.taken_over |= holder.trials
                self._delete(holder.run_id)
        return live

    def holding(self, trial_ids: set[str]) -> dict[str, Holder]:
        """Which of `trial_ids` another live orchestrator holds now, and which one."""
        return _holding(set(trial_ids), self.others())

    def release(self, trial_ids: set[str]) -> None:
        self._withdraw(set(trial_ids) & self.held)
        self.held -= set(trial_ids)

    # --- the lease run -------------------------------------------------------------------------------------
    def _publish(self, trial_ids: set[str]) -> None:
        holds = {f"{HOLDS_PREFIX}{trial_id}": "1" for trial_id in trial_ids}
        if self.run_id is None:
            host, pid = socket.gethostname(), os.getpid()
            tags = {ROLE_TAG: LEASE_ROLE, STUDY_TAG: self.store.study_name, HOST_TAG: host, PID_TAG: str(pid),
                    STARTED_TAG: process_start(pid), HEARTBEAT_TAG: repr(time.time()), **holds}
            run = self.store.client.create_run(self.store.experiment_id, run_name=f"lease of pid {pid} on {host}",
                                               tags=tags)
            self.run_id = run.info.run_id
            self._start_heartbeat()
        else:
            self.store.set_tags(self.run_id, holds)

    def _withdraw(self, trial_ids: set[str]) -> None:
        from mlflow.exceptions import MlflowException  # (here: a run with nothing to lease never loads MLflow)

        for trial_id in trial_ids:
            try:
                self.store.client.delete_tag(self.run_id, f"{HOLDS_PREFIX}{trial_id}")
            except MlflowException:  # not published
                pass

    def _delete(self, run_id: str) -> None:
        from mlflow.exceptions import MlflowException

        try:  # closed first: a store read without MLflow's filter on deleted runs sees no RUNNING lease left
            self.store.client.set_terminated(run_id, status="FINISHED")
            self.store.client.delete_run(run_id)
        except MlflowException:  # another orchestrator deleted it first
            pass

    def _start_heartbeat(self) -> None:
        def beat() -> None:
            while not self._stop.wait(self.heartbeat_s):
                run_id = self.run_id
                if run_id is None:  # abandoned: nothing more is written
                    return
                try:
                    self.store.set_tags(run_id, {HEARTBEAT_TAG: repr(time.time())})
                except Exception:  # a store outage ends the study elsewhere; the lease then expires
                    _log.debug("lease heartbeat failed", exc_info=True)

        self._beating = threading.Thread(target=beat, name="orchestrator-lease-heartbeat", daemon=True)
        self._beating.start()

    def abandon(self) -> None:
        """Stop the heartbeat and write nothing more (the store is unreachable): the lease lapses by itself."""
        self._stop.set()
        self.run_id = None

    def close(self) -> None:
        """Stop the heartbeat and delete the lease run: every trial it held is free again."""
        self._stop.set()
        if self._beating is not None:
            self._beating.join(timeout=5)
        if self.run_id is not None:
            self._delete(self.run_id)
        self.held.clear()

    def __enter__(self) -> "LeaseBook":
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.close()
        except Exception:  # the store may be what failed; an unreleased lease expires by itself
            _log.debug("could not give the leases back", exc_info=True)


def _holding(trial_ids: set[str], holders: list[Holder]) -> dict[str, Holder]:
    """Which of `trial_ids` another live orchestrator holds, and which one."""
    found: dict[str, Holder] = {}
    for holder in holders:
        for trial_id in trial_ids & holder.trials:
            found.setdefault(trial_id, holder)
    return found

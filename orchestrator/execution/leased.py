"""Running a study's trials while other orchestrators may be running the same study: each trial is run by
the one orchestrator that leases it (tracking/leases.py), the others wait for it.

In rounds: lease what is free, run it, give it back; then wait until no live orchestrator holds any of the
trials left, and look again. A trial another orchestrator finished meanwhile is done (its run is in the
store); one it failed, or left behind when it died, is leased and run here in the next round. So two runs of
one study end with every trial run once, whichever starts first, and the one that started second exits when
the study is complete, with the same report.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from ..study import Study
from ..tracking.leases import LeaseBook
from ..tracking.store import TRIAL_ID_TAG, StudyStore
from ..trial.trials import StoredIdentities, Trial
from . import interrupt

POLL_S = 5.0


@dataclass
class Shared:
    """What happened besides this orchestrator's own trials."""

    by_others: list[Trial] = field(default_factory=list)  # finished by another orchestrator while this one waited
    concurrency: int = 1  # the most trials this orchestrator ran at once


def run_leased(study: Study, rows: list[Trial], todo: list[Trial], store: StudyStore, leases: LeaseBook,
               run_batch: Callable[[list[Trial]], int], say: Callable[[str], None], poll_s: float = POLL_S,
               code: str | set[str] | None = None) -> Shared:
    """Run `todo` (of the study's expanded `rows`) through `run_batch` (returns how many trials ran at once), each
    trial only under its lease. Returns early when Ctrl-C stopped the batch (interrupt.requested()). `code`: the
    current code fingerprints (each trial's own); a trial counts as finished meanwhile only by a run of that
    code (a stale trial being retrained has a finished run of other code already)."""
    pending = {trial.trial_id: trial for trial in todo}
    shared = Shared()
    stored = StoredIdentities(rows)  # the identities older versions tagged the trials' runs with
    while pending:
        leases.acquire(set(pending))
        # `todo` was read before the leases were: a trial another orchestrator finished, then gave back, in
        # between is done (its holder records the FINISHED run before it lets go of the lease).
        finished = _finished(study, store, set(pending) & leases.held, code)
        leases.release(finished)
        shared.by_others += [pending.pop(trial_id) for trial_id in sorted(finished)]
        mine = [trial for trial_id, trial in pending.items() if trial_id in leases.held]
        if mine:
            ids = {trial.trial_id for trial in mine}
            # Runs of these trials left RUNNING by an orchestrator that died, of this version or an older one.
            store.mark_stale_runs(ids | _unheld_older_tags(mine, stored, leases))
            try:
                shared.concurrency = max(shared.concurrency, run_batch(mine))
            finally:
                leases.release(ids)
            for trial_id in ids:
                del pending[trial_id]
            if interrupt.requested():
                return shared
        if pending:
            _wait_for_holders(leases, set(pending), say, poll_s)
            for trial_id in _done_elsewhere(study, store, leases, set(pending), code):
                shared.by_others.append(pending.pop(trial_id))
    return shared


def _unheld_older_tags(trials: list[Trial], stored: StoredIdentities, leases: LeaseBook) -> set[str]:
    """The older identities runs of these trials may carry, but those a live orchestrator holds (one of the
    version that tags runs so leases the trials under them)."""
    older = {tag for trial in trials for tag in stored.candidates(trial)} - {trial.trial_id for trial in trials}
    return older - set(leases.holding(older)) if older else set()


def _wait_for_holders(leases: LeaseBook, trial_ids: set[str], say: Callable[[str], None], poll_s: float) -> None:
    """Until no live orchestrator holds any of `trial_ids` (a dead one's leases lapse: see leases.py)."""
    announced: list[str] | None = None
    while True:
        holders = leases.holding(trial_ids)
        if not holders:
            return
        who = sorted({str(holder) for holder in holders.values()})
        if who != announced:
            say(f"{len(holders)} trial(s) of this study are being run by another orchestrator ({', '.join(who)}): "
                "waiting for them to end; their results go into the same store and report (Ctrl-C stops waiting).")
            announced = who
        time.sleep(poll_s)


def _finished(study: Study, store: StudyStore, trial_ids: set[str], code: str | set[str] | None = None) -> set[str]:
    """Of `trial_ids`, the grid trials that have a FINISHED run in the store (a search row has no identity to
    look up: see _done_elsewhere)."""
    if not trial_ids or study.search.sampled:
        return set()
    done = trial_ids & store.finished_trial_ids(code)
    # a trial another study of the store finished meanwhile (its orchestrator held the lease) is done too
    return done | {run.data.tags.get(TRIAL_ID_TAG) for run in store.shared_runs(trial_ids - done, code)}


def _done_elsewhere(study: Study, store: StudyStore, leases: LeaseBook, trial_ids: set[str],
                    code: str | set[str] | None = None) -> set[str]:
    """Of trials no longer held by anyone: those another orchestrator completed. A grid trial is complete when
    the store has its FINISHED run; a search row (its samples have no identity in advance) when the
    orchestrator that held it gave it back rather than dying."""
    if not study.search.sampled:
        return _finished(study, store, trial_ids, code)
    return trial_ids - leases.taken_over

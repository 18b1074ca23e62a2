"""Run a validated study: skip finished trials, run the rest (Ray Tune, or in-process with `local`), their
events written to MLflow by the driver's recorder and shown by the console. The report is the caller's next
step (orchestrator/run.py): execution knows nothing of reporting."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from dape_core.plugins import plugin_tags

from ..errors import StaleTrials, StudyInterrupted, StudyTerminated, TrackingServerUnreachable, exception_chain
from ..planning.learned import load_measured
from ..planning.schedule import local_slots, packed
from ..run_context import RunContext
from ..study import Study
from ..study.code_identity import CodeFingerprint, code_fingerprint
from ..tracking.code_check import (
    CURRENT,
    STALE,
    UNKNOWN,
    CodeCheck,
    StalePolicy,
    current_codes,
    reused_from_others,
    store_code_check,
)
from ..tracking.console import ConsoleProgress
from ..tracking.events import Tally, TrialEvents
from ..tracking.leases import LeaseBook
from ..tracking.recorder import MLflowRecorder
from ..tracking.sharing import DeviceSharing
from ..tracking.source import DIFF_FILE, code_source
from ..tracking.store import CODE_TAG, REUSED_FROM_PREFIX, STUDY_TAG, StudyStore
from ..trial.trials import StoredIdentities, Trial, distinct
from . import interrupt
from .checkpoints import CheckpointCleanup
from .leased import run_leased


@dataclass
class StudyOutcome:
    trials: list[Trial]
    skipped: list[Trial]
    failed: dict[str, str] = field(default_factory=dict)
    report_dir: Path | None = None  # the report, written after the run (orchestrator/run.py)
    report_summary: str = ""  # what the command line prints (render_md.summary)
    wall_seconds: float = 0.0
    trial_seconds: float = 0.0  # the trials' own training and evaluation time, summed
    concurrency: int = 1
    steps_run: int = 0
    trials_run: int = 0
    claims: list = field(default_factory=list)  # the report's judging.claims.ClaimResult, one per claim of `expect:`

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def overhead(self) -> float | None:
        """Share of the wall time the trial slots were not training or evaluating:
        1 − (Σ trial work / concurrency) / wall time. It includes start-up, bookkeeping and slots left idle
        when the trials do not divide evenly among them. None where it cannot be measured: nothing timed, or
        more trial work than the slots had wall time (`overhead_inconsistent`), which a share cannot be."""
        if not self.trial_seconds or not self.wall_seconds or self.overhead_inconsistent:
            return None
        return 1.0 - (self.trial_seconds / self.concurrency) / self.wall_seconds

    @property
    def overhead_inconsistent(self) -> bool:
        """The trials' recorded work exceeds this run's slot time: a trial resumed from its checkpoint (after a
        crash or `kill -9`) reports its training time since it first started, not since this run began."""
        return bool(self.wall_seconds) and self.trial_seconds / self.concurrency > self.wall_seconds


def select_trials(study: Study, rows: list[Trial], store: StudyStore, failed_only: bool = False,
                  stale: StalePolicy = StalePolicy.REFUSE,
                  code: CodeFingerprint | None = None) -> tuple[list[Trial], list[Trial]]:
    """(to run, already finished) of the study's expanded `rows`. With `failed_only`, only trials whose latest
    run FAILED are run. A finished trial is reused when its run's code fingerprint is `code` (default: the
    current code's) or unknown (a store from before it was recorded), its run this study's or (of the current
    code) another study's of the store; one computed by other code is "stale" (tracking/code_check.py):
    StaleTrials (exit 2, naming them and the files that differ) unless `stale` says to retrain or keep them."""
    todo, done, _ = _select(study, rows, store, failed_only, stale, code)
    return todo, done


def _select(study: Study, rows: list[Trial], store: StudyStore, failed_only: bool, stale: StalePolicy,
            code: CodeFingerprint | None) -> tuple[list[Trial], list[Trial], CodeCheck | None]:
    if study.search.sampled:
        return rows, [], None  # sampled trials have no identity before Tune samples them
    trials = distinct(rows)  # rows sharing a trial run it once
    check = store_code_check(store, rows, code or code_fingerprint(study.plugin_payloads()))
    stale_trials = check.stale(rows)
    if stale_trials and stale == StalePolicy.REFUSE:
        raise StaleTrials(f"{check.describe_stale(rows)}. Their results would be reported beside those of the "
                          "current code. Rerun with --retrain-stale to train them again with the current code, or "
                          "with --keep-stale to keep their results (the report marks them). Nothing was run.")
    reused = {CURRENT, UNKNOWN} | ({STALE} if stale == StalePolicy.KEEP else set())
    todo = [t for t in trials if check.state(t) not in reused]
    if failed_only:
        failed, stored = store.failed_trial_ids(), StoredIdentities(rows)
        todo = [t for t in todo if stored.done(t, failed)]
    return todo, [t for t in trials if check.state(t) in reused], check


def _link_reused(store: StudyStore, check: CodeCheck | None, skipped: list[Trial], say) -> None:
    """The trials reused from the store's other studies: a tag per trial on this study's parent run,
    `reused_from.<trial id>` = "<study> <run id>" (the run that computed it), and one line said."""
    if check is None:
        return
    others = reused_from_others(check, skipped, store.study_name)
    if not others:
        return
    by_study: dict[str, int] = {}
    tags = {}
    for trial_id, run in others.items():
        study = run.data.tags.get(STUDY_TAG, "?")
        by_study[study] = by_study.get(study, 0) + 1
        tags[f"{REUSED_FROM_PREFIX}{trial_id}"] = f"{study} {run.info.run_id}"
    if store.parent_run_id:
        store.set_tags(store.parent_run_id, tags)
    say(f"{len(others)} trial(s) reused from other studies of this store (same config and code): "
        + ", ".join(f"{study} ({count})" for study, count in sorted(by_study.items())))


@dataclass
class _Running:
    """The state of one run while its trials run: what it runs, its event stream, console and leases."""

    todo: list[Trial]
    events: TrialEvents
    progress: ConsoleProgress
    leases: LeaseBook
    outcome: StudyOutcome
    code: set[str]  # the current code fingerprints (each trial's own: tracking/code_check.py current_codes)
    later_lengths: dict[str, list[int]]  # trial id -> lengths it scores after its own (run_study's argument)
    code_files: dict[str, str] = field(default_factory=dict)  # the fingerprint's files: each trial checks its own


def run_study(context: RunContext, later_lengths: dict[str, list[int]] | None = None) -> StudyOutcome:
    """Run the study's unfinished trials. Everything that can be checked before a trial runs is checked before
    anything is written: the store (created with the context), Ray and whether a node can host a trial.
    `later_lengths`: trial id -> lengths that trial scores after its own evaluation, outside its config and
    identity (the study's report.lengths: orchestrator/run.py says which); they count in the trials' order.
    Raises StudyInterrupted after Ctrl-C, StudyTerminated after SIGTERM (the trials it stopped are closed as
    KILLED; interrupt.py)."""
    study, store = context.study, context.store
    code = code_fingerprint(study.plugin_payloads())  # the code the trials execute (study/code_identity.py)
    todo, skipped, check = _select(study, context.rows, store, context.failed_only, context.stale, code)
    if todo:  # (the measured durations read every finished run of the store: not for nothing to run)
        # longest first, so that no long trial ends the study alone
        todo = packed(todo, study, load_measured(context.store.reader), later_lengths, _local_slots(context, todo))
    progress = context.progress or ConsoleProgress(len(todo))
    progress.total = study.search.samples_per_row * len(todo)
    if todo and not context.local:  # before the parent run: an unreachable cluster leaves nothing behind
        _prepare_ray(context, progress.message)
    source = code_source()  # which code ran: mlflow.source.* tags, code_version, the uncommitted diff's hash
    # ... and each plugin's source hash (dape_core/plugins.py): a stored result names the code that produced it
    source_tags = {**source.tags(context.study_path), **plugin_tags(study.plugin_payloads()), CODE_TAG: code.digest}
    outcome = StudyOutcome(trials=todo + skipped, skipped=skipped)
    # The recorder first: a listener that fails (the tracking server went away) stops the study before the
    # console says a trial finished that the store does not know about.
    resources = {"cpus": study.resources.cpus, "gpus": study.resources.gpus}
    sharing = DeviceSharing()  # first: the recorder logs its count with each final result
    # The checkpoint cleanup after the recorder: a finished trial's checkpoints go once its result is recorded.
    events = TrialEvents([sharing, MLflowRecorder(store, {**source_tags, "study": study.name}, resources, sharing,
                                                        code),
                          CheckpointCleanup(), progress])
    interrupt.reset()
    with LeaseBook(store) as leases:
        store.start_parent({"description": study.description[:4000], **source_tags,
                            "trials": str(len(todo) + len(skipped))}, idle=not todo)
        if source.dirty and not store.parent_kept:  # (kept: its diff's hash is its tag, the diff there)
            store.log_parent_text(source.diff, DIFF_FILE)
        if skipped:
            progress.message(f"{len(skipped)} trial(s) already finished in the tracking store: not rerun")
            _link_reused(store, check, skipped, progress.message)
        _run_and_close(context, _Running(todo, events, progress, leases, outcome, current_codes(code, todo),
                                           later_lengths or {}, code.files))
    outcome.wall_seconds = time.monotonic() - context.started
    return outcome


def _run_and_close(context: RunContext, running: _Running) -> None:
    """Run the leased trials and close the parent run with what happened: FINISHED, FAILED (some trial
    failed), KILLED (Ctrl-C, SIGTERM or an error: the open trial runs are closed as KILLED too), or left as it is
    when the tracking server is what failed (nothing more can be written)."""
    study, store, todo, events, progress, outcome = (context.study, context.store, running.todo, running.events,
                                                     running.progress, running.outcome)
    leases = running.leases
    status: str | None = "FINISHED"  # None: the parent run is left open (the tracking server is unreachable)
    def last_resort(what: str) -> str:  # the clean stop did not end in time (interrupt.py): close what is open
        stopped = _close_open_trials(events)
        leases.close()
        store.end_parent("KILLED")
        if not context.local:
            from .cluster import kill_private_ray

            kill_private_ray()
        return (f"Interrupted by {what}: Ray did not stop the trials within {interrupt.STOP_GRACE_S:.0f}s (its "
                f"processes were signalled too); {stopped} running trial(s) were closed as KILLED. Run the same "
                "command to resume: stopped trials continue from their last checkpoint.")

    try:
        if todo:
            with progress, interrupt.last_resort(last_resort):
                shared = run_leased(study, context.rows, todo, store, leases,
                                    lambda batch: _run_trials(context, batch, events, progress, running.later_lengths,
                                                                      running.code_files),
                                    progress.message,
                                    code=running.code)
            outcome.concurrency = shared.concurrency
            if shared.by_others:
                progress.message(f"{len(shared.by_others)} trial(s) were run by another orchestrator meanwhile")
                outcome.skipped = outcome.skipped + shared.by_others
            if interrupt.requested():
                raise KeyboardInterrupt
        reused = {trial.trial_id for trial in outcome.skipped}
        _tally_outcome(outcome, events.tally, study, [trial for trial in todo if trial.trial_id not in reused])
        if outcome.failed:
            status = "FAILED"
    except BaseException as error:
        status = "KILLED"
        unreachable = next((e for e in exception_chain(error) if isinstance(e, TrackingServerUnreachable)), None)
        if unreachable is not None:
            status = None  # nothing more can be written; the next run reuses the parent run
            leases.abandon()  # and takes the leases over (this process will be gone, see leases.py)
            raise unreachable from unreachable.__cause__  # without Ray Tune's wrapping of the callback's error
        stopped = _close_open_trials(events)
        if isinstance(error, KeyboardInterrupt):
            stopped_by = StudyTerminated if interrupt.exit_code() == StudyTerminated.exit_code else StudyInterrupted
            raise stopped_by(
                f"by {interrupt.cause()}. {len(events.tally.finished)} trial(s) finished in this run and are safe in "
                f"{store.tracking_uri}; {stopped} running trial(s) were stopped and their runs closed as KILLED. "
                "Run the same command to resume: finished trials are skipped, stopped ones continue from their "
                "last checkpoint.") from None
        raise
    finally:
        if status:
            try:
                store.end_parent(status)
            except Exception:  # the store may be the thing that failed; the original error matters more
                logging.getLogger(__name__).debug("could not close the parent run", exc_info=True)


def _close_open_trials(events: TrialEvents) -> int:
    try:
        return events.interrupt_open()
    except Exception:  # the store may be what failed: the runs left RUNNING are closed by the next run
        logging.getLogger(__name__).debug("could not close the open trial runs", exc_info=True)
        return 0


def _local_slots(context: RunContext, todo: list[Trial]) -> int:
    """How many of the trials the private local Ray runs at once (it has this machine's CPUs: cluster.py); 0
    where that is not known before Ray starts (a cluster, GPUs) and 1 with --local."""
    if context.local:
        return 1
    if context.address:
        return 0
    return local_slots(context.study.resources, max(trial.workers for trial in todo))


def _prepare_ray(context: RunContext, say) -> None:
    """Start or join Ray (bounded in time), then make sure some node can host a trial (cluster.py)."""
    from .cluster import one_worker_bundles, require_placeable
    from .ray_tune import start_ray

    address, resources = context.address, context.study.resources
    start_ray(address, context.connect_timeout)
    where = f"the Ray cluster at {address}" if address else "the local Ray (this machine)"
    require_placeable(one_worker_bundles(resources.cpus, resources.gpus), where, context.resource_wait, say)
    if context.study.plugins:
        from .plugins_on_workers import require_plugins_on_workers

        require_plugins_on_workers(context.study, where)


def _run_trials(context: RunContext, todo: list[Trial], events: TrialEvents, progress: ConsoleProgress,
                later_lengths: dict[str, list[int]], code_files: dict[str, str] | None = None) -> int:
    """Run the trials; returns how many could run at once. `code_files`: the code fingerprint's per-file hashes,
    which each trial's process compares with its files on disk (trainable.py CodeGuard)."""
    later = {trial.trial_id: later_lengths[trial.trial_id] for trial in todo if trial.trial_id in later_lengths}
    if context.local:
        from .local import run_local

        run_local(todo, events, context.study, context.storage_dir, later, code_files)
        return 1
    from .ray_tune import run_with_tune  # Ray is imported only when trials run on it

    return run_with_tune(context.study, todo, events, context.storage_dir, context.address, progress, later,
                         code_files)


def _tally_outcome(outcome: StudyOutcome, tally: Tally, study: Study, todo: list[Trial]) -> None:
    """`todo`: the trials this orchestrator was to run itself (not those another one ran meanwhile)."""
    outcome.failed = dict(tally.failed)
    outcome.trial_seconds = sum(tally.work_seconds.values())
    outcome.steps_run = sum(tally.steps_run.values())
    outcome.trials_run = len(tally.started)
    if not study.search.sampled:
        for trial in todo:
            if trial.trial_id not in tally.finished and trial.trial_id not in tally.failed:
                outcome.failed[trial.trial_id] = "trial did not finish"

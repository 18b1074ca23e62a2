"""One stream of trial events, whoever runs the trials: Ray Tune's callback (execution/tune_callback.py)
and the in-process `--local` runner both feed a `TrialEvents`, which tells what each event means for the
study (a final result with an error makes the trial's end a failure; an end without a final result is a
scheduler's early stop) and hands it to its listeners: the MLflow recorder (the only MLflow writer) and the
console progress. It also keeps the tally the study's outcome is made of.

Events are keyed by `key`: the trial identity by default; under a sampling search Ray Tune's own trial id,
since a searcher may sample the same configuration twice and each sample gets its own run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import dape_core.metric_names as names

from ..trial.protocol import FINAL_FLAG
from ..trial.trials import Trial


@dataclass(frozen=True)
class TrialEvent:
    trial: Trial
    key: str


@dataclass(frozen=True)
class TrialStarted(TrialEvent):
    """Started, or restarted after a crash (a retried trial keeps its key)."""


@dataclass(frozen=True)
class TrialResult(TrialEvent):
    """A progress result, or the final one (`final`); see trial/protocol.py."""

    result: dict

    @property
    def final(self) -> bool:
        return bool(self.result.get(FINAL_FLAG))

    @property
    def step(self) -> int:
        return int(self.result.get("step", 0))


@dataclass(frozen=True)
class TrialFinished(TrialEvent):
    stopped_early: bool  # a scheduler (ASHA) stopped it before its final result


@dataclass(frozen=True)
class TrialFailed(TrialEvent):
    reason: str


@dataclass(frozen=True)
class TrialInterrupted(TrialEvent):
    """Ctrl-C stopped the study while the trial ran: not a failure; the next run resumes it."""


@dataclass(frozen=True)
class TrialRetried(TrialEvent):
    """The trial's process crashed and Ray Tune restarts it."""

    reason: str
    attempt: int


class TrialListener:
    """Receives every event of a study's trials; each method does nothing unless overridden."""

    def trial_started(self, event: TrialStarted) -> None: ...

    def trial_result(self, event: TrialResult) -> None: ...

    def trial_finished(self, event: TrialFinished) -> None: ...

    def trial_failed(self, event: TrialFailed) -> None: ...

    def trial_retried(self, event: TrialRetried) -> None: ...

    def trial_interrupted(self, event: TrialInterrupted) -> None: ...


@dataclass
class Tally:
    """What the study's outcome reports, by key."""

    started: set[str] = field(default_factory=set)
    finished: set[str] = field(default_factory=set)
    failed: dict[str, str] = field(default_factory=dict)  # key -> reason
    got_final: set[str] = field(default_factory=set)
    work_seconds: dict[str, float] = field(default_factory=dict)  # training plus evaluation, per trial
    steps_run: dict[str, int] = field(default_factory=dict)
    retries: dict[str, int] = field(default_factory=dict)
    interrupted: set[str] = field(default_factory=set)


class TrialEvents:
    """The stream: call `started`, `result`, `ended`, `crashed` and `errored` as the runner sees them."""

    def __init__(self, listeners: list[TrialListener]):
        self.listeners = listeners
        self.tally = Tally()
        self.open: dict[str, Trial] = {}  # started, not ended yet

    def _emit(self, method: str, event: TrialEvent) -> None:
        for listener in self.listeners:
            getattr(listener, method)(event)

    def started(self, trial: Trial, key: str | None = None) -> None:
        key = key or trial.trial_id
        self.tally.started.add(key)
        self.tally.failed.pop(key, None)
        self.open[key] = trial
        self._emit("trial_started", TrialStarted(trial, key))

    def result(self, trial: Trial, result: dict, key: str | None = None) -> None:
        event = TrialResult(trial, key or trial.trial_id, result)
        self.tally.steps_run[event.key] = max(event.step, self.tally.steps_run.get(event.key, 0))
        if event.final:
            self.tally.got_final.add(event.key)
            if result.get("error"):  # the trial ended itself with a reason (e.g. a NaN loss)
                self.tally.failed[event.key] = str(result["error"])
            else:
                self.tally.work_seconds[event.key] = (float(result.get(names.TRAIN_SECONDS, 0.0))
                                                      + float(result.get(names.EVAL_SECONDS, 0.0)))
        self._emit("trial_result", event)

    def ended(self, trial: Trial, key: str | None = None) -> None:
        """The trial's function returned: a success, unless its final result carried an error."""
        key = key or trial.trial_id
        self.open.pop(key, None)
        if key in self.tally.failed:
            self._emit("trial_failed", TrialFailed(trial, key, self.tally.failed[key]))
            return
        self.tally.finished.add(key)
        self._emit("trial_finished", TrialFinished(trial, key, stopped_early=key not in self.tally.got_final))

    def crashed(self, trial: Trial, reason: str, key: str | None = None) -> None:
        """The trial's process died and will be retried; its run stays open and counts the attempts."""
        key = key or trial.trial_id
        self.tally.retries[key] = self.tally.retries.get(key, 0) + 1
        self._emit("trial_retried", TrialRetried(trial, key, reason, self.tally.retries[key]))

    def errored(self, trial: Trial, reason: str, key: str | None = None) -> None:
        """The trial failed for good (retries exhausted, or an exception in `--local` mode)."""
        key = key or trial.trial_id
        self.open.pop(key, None)
        self.tally.failed[key] = reason
        self._emit("trial_failed", TrialFailed(trial, key, reason))

    def interrupted(self, trial: Trial, key: str | None = None) -> None:
        """Ctrl-C stopped the trial (or the study stopped before it ended): neither finished nor failed."""
        key = key or trial.trial_id
        self.open.pop(key, None)
        self.tally.interrupted.add(key)
        self._emit("trial_interrupted", TrialInterrupted(trial, key))

    def interrupt_open(self) -> int:
        """Every trial started and not ended is interrupted; returns how many."""
        still_open = list(self.open.items())
        for key, trial in still_open:
            self.interrupted(trial, key)
        return len(still_open)

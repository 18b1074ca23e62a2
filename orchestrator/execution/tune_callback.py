"""A Ray Tune callback on the driver that turns Tune's trial events into the study's own trial events
(tracking/events.py), whose listeners write MLflow and the console."""

from __future__ import annotations

from pathlib import Path

from ray.tune import Callback

from ..errors import last_error_line
from ..tracking.events import TrialEvents
from ..trial.trials import Trial, materialize
from . import interrupt


class TuneEventsCallback(Callback):
    def __init__(self, events: TrialEvents):
        self.events = events

    def __getstate__(self) -> dict:
        # Ray Tune pickles its run config (callbacks included) into the experiment state for restore;
        # the listeners hold an MLflow client and a console (locks) and are re-attached by the driver.
        return {}

    def _concrete(self, trial) -> tuple[Trial, str]:
        """The concrete Trial behind a Tune trial and its key in the events, built once per Tune trial (its
        config does not change), not at every result. Sampled trials are told apart by Tune's id (the same
        configuration may be sampled twice)."""
        known = self.__dict__.setdefault("_concrete_trials", {})  # (not pickled: see __getstate__)
        if trial.trial_id not in known:
            concrete = materialize(trial.config)
            key = f"{concrete.trial_id}:{trial.trial_id}" if trial.config.get("params") else concrete.trial_id
            known[trial.trial_id] = (concrete, key)
        return known[trial.trial_id]

    def on_trial_start(self, iteration, trials, trial, **info):
        self.events.started(*self._concrete(trial))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        concrete, key = self._concrete(trial)
        self.events.result(concrete, result, key)

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.events.ended(*self._concrete(trial))

    def on_trial_recover(self, iteration, trials, trial, **info):
        reason = last_error_line(_error_text(trial)) or "trial process died"
        concrete, key = self._concrete(trial)
        self.events.crashed(concrete, reason, key)

    def on_trial_error(self, iteration, trials, trial, **info):
        concrete, key = self._concrete(trial)
        if interrupt.requested():  # stopped by Ctrl-C, not by a fault of its own
            self.events.interrupted(concrete, key)
            return
        reason = last_error_line(_error_text(trial)) or "trial process failed"
        self.events.errored(concrete, reason, key)


def _error_text(trial) -> str | None:
    """Tune writes the error to the trial's local staging folder first; storage gets it only at sync."""
    path = trial.error_file
    if path and Path(path).is_file():
        return Path(path).read_text()
    return trial.get_error()

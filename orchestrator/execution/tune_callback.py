"""A Ray Tune callback on the driver that turns Tune's trial events into the study's own trial events
(tracking/events.py), whose listeners write MLflow and the console."""

from __future__ import annotations

from pathlib import Path

from ray.tune import Callback

from ..errors import last_error_line
from ..trial.trials import materialize
from ..tracking.events import TrialEvents
from . import interrupt


class TuneEventsCallback(Callback):
    def __init__(self, events: TrialEvents):
        self.events = events

    def __getstate__(self) -> dict:
        # Ray Tune pickles its run config (callbacks included) into the experiment state for restore;
        # the listeners hold an MLflow client and a console (locks) and are re-attached by the driver.
        return {}

    @staticmethod
    def _key(trial) -> str:
        """Sampled trials are told apart by Tune's id (the same configuration may be sampled twice)."""
        concrete = materialize(trial.config)
        return f"{concrete.trial_id}:{trial.trial_id}" if trial.config.get("params") else concrete.trial_id

    def on_trial_start(self, iteration, trials, trial, **info):
        self.events.started(materialize(trial.config), self._key(trial))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.events.result(materialize(trial.config), result, self._key(trial))

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.events.ended(materialize(trial.config), self._key(trial))

    def on_trial_recover(self, iteration, trials, trial, **info):
        reason = last_error_line(_error_text(trial)) or "trial process died"
        self.events.crashed(materialize(trial.config), reason, self._key(trial))

    def on_trial_error(self, iteration, trials, trial, **info):
        if interrupt.requested():  # stopped by Ctrl-C, not by a fault of its own
            self.events.interrupted(materialize(trial.config), self._key(trial))
            return
        reason = last_error_line(_error_text(trial)) or "trial process failed"
        self.events.errored(materialize(trial.config), reason, self._key(trial))


def _error_text(trial) -> str | None:
    """Tune writes the error to the trial's local staging folder first; storage gets it only at sync."""
    path = trial.error_file
    if path and Path(path).is_file():
        return Path(path).read_text()
    return trial.get_error()

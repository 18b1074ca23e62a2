"""A Ray Tune callback on the driver that hands Tune's trial events to the TrialRecorder."""

from __future__ import annotations

from pathlib import Path

from ray.tune import Callback

from .recorder import TrialRecorder
from .trials import materialize


class TuneRecorderCallback(Callback):
    def __init__(self, recorder: TrialRecorder):
        self.recorder = recorder

    def __getstate__(self) -> dict:
        # Ray Tune pickles its run config (callbacks included) into the experiment state for restore;
        # the recorder holds an MLflow client and a console (locks) and is re-attached by the driver.
        return {}

    @staticmethod
    def _key(trial) -> str:
        """Sampled trials are told apart by Tune's id (the same configuration may be sampled twice)."""
        concrete = materialize(trial.config)
        return f"{concrete.trial_id}:{trial.trial_id}" if trial.config.get("params") else concrete.trial_id

    def on_trial_start(self, iteration, trials, trial, **info):
        self.recorder.start(materialize(trial.config), self._key(trial))

    def on_trial_result(self, iteration, trials, trial, result, **info):
        self.recorder.result(materialize(trial.config), result, self._key(trial))

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.recorder.complete(materialize(trial.config), self._key(trial))

    def on_trial_recover(self, iteration, trials, trial, **info):
        reason = last_error_line(_error_text(trial)) or "trial process died"
        self.recorder.retry(materialize(trial.config), reason, self._key(trial))

    def on_trial_error(self, iteration, trials, trial, **info):
        reason = last_error_line(_error_text(trial)) or "trial process failed"
        self.recorder.error(materialize(trial.config), reason, self._key(trial))


def _error_text(trial) -> str | None:
    """Tune writes the error to the trial's local staging folder first; storage gets it only at sync."""
    path = trial.error_file
    if path and Path(path).is_file():
        return Path(path).read_text()
    return trial.get_error()


def last_error_line(trace: str | None) -> str:
    """The exception line of an error trace ("ValueError: ..."), which is what a researcher needs first."""
    if not trace:
        return ""
    lines = [line.strip() for line in str(trace).strip().splitlines() if line.strip()]
    for line in reversed(lines):
        head = line.split(":")[0]
        if head.endswith(("Error", "Exception")) or "Error(" in head:
            return line
    return lines[-1]

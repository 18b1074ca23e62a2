"""A Ray Tune callback on the driver: the single writer that turns trial results into MLflow runs."""

from __future__ import annotations

import time
from pathlib import Path

from ray.tune import Callback

from .progress import Progress
from .trainable import FINAL_FLAG
from .tracking import SWEPT_TAG_PREFIX, TRIAL_ID_TAG, StudyTracker, flatten
from .trials import Trial

# Keys every Tune result carries that are bookkeeping, not metrics of ours.
_TRAIN_KEYS = ("train_loss", "lr")
_RESULT_KEYS = ("train_seconds", "eval_seconds", "tokens_seen", "num_parameters")


class MlflowTrialLogger(Callback):
    def __init__(self, tracker: StudyTracker, trials: list[Trial], progress: Progress, tags: dict[str, str]):
        self.tracker = tracker
        self.trials = {trial.trial_id: trial for trial in trials}
        self.progress = progress
        self.common_tags = tags
        self.run_ids: dict[str, str] = {}  # study trial id -> MLflow run id
        self.failed: dict[str, str] = {}  # study trial id -> reason
        self.finished: set[str] = set()
        self.train_seconds: dict[str, float] = {}

    def __getstate__(self) -> dict:
        # Ray Tune pickles its run config (callbacks included) into the experiment state for restore;
        # the MLflow client and the console hold locks and are re-attached by the driver, never pickled.
        return {key: value for key, value in self.__dict__.items() if key not in ("tracker", "progress")}

    @staticmethod
    def _study_id(tune_trial) -> str:
        return tune_trial.config["trial"]["trial_id"]

    def on_trial_start(self, iteration, trials, trial, **info):
        trial_id = self._study_id(trial)
        spec = self.trials[trial_id]
        if trial_id not in self.run_ids:  # a retried trial keeps its run
            tags = {TRIAL_ID_TAG: trial_id, "variant": spec.variant, "label": spec.label, "seed": str(spec.seed),
                    "baseline": str(spec.baseline).lower(), "row_index": str(spec.index), **self.common_tags,
                    **swept_tags(spec)}
            self.run_ids[trial_id] = self.tracker.create_trial_run(spec.run_name, tags, flatten(spec.config))
        self.progress.trial_started(spec)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        trial_id = self._study_id(trial)
        run_id = self.run_ids[trial_id]
        now = int(time.time() * 1000)
        step = int(result.get("step", 0))
        if result.get(FINAL_FLAG):
            perplexity = {int(key[4:]): value for key, value in result.items() if key.startswith("ppl_")}
            metrics = {f"ppl_{length}": value for length, value in perplexity.items()}
            metrics.update({key: result[key] for key in _RESULT_KEYS if key in result})
            self.tracker.log_metrics(run_id, metrics, step=step, timestamp_ms=now)
            self.tracker.log_series(run_id, "ppl_by_length", perplexity, timestamp_ms=now)
            self.tracker.set_tags(run_id, {"data_hash": result.get("data_hash", ""),
                                           "device": result.get("device", "unknown")})
            self.train_seconds[trial_id] = float(result.get("train_seconds", 0.0))
            self.progress.trial_evaluated(self.trials[trial_id], perplexity)
        else:
            self.tracker.log_metrics(run_id, {k: result[k] for k in _TRAIN_KEYS if k in result}, step, now)
            self.progress.trial_step(self.trials[trial_id], step, int(result.get("total_steps", 0)), result.get("train_loss"))

    def on_trial_complete(self, iteration, trials, trial, **info):
        trial_id = self._study_id(trial)
        self.tracker.end_trial_run(self.run_ids[trial_id], "FINISHED")
        self.finished.add(trial_id)
        self.progress.trial_finished(self.trials[trial_id])

    def on_trial_error(self, iteration, trials, trial, **info):
        trial_id = self._study_id(trial)
        reason = _last_error_line(_error_text(trial)) or "trial process failed"
        run_id = self.run_ids.get(trial_id)
        if run_id:
            self.tracker.set_tags(run_id, {"error": reason[:4000]})
            self.tracker.end_trial_run(run_id, "FAILED")
        self.failed[trial_id] = reason
        self.progress.trial_failed(self.trials[trial_id], reason)


def swept_tags(trial: Trial) -> dict[str, str]:
    """What this trial's row changes on top of the study's base (`swept.model.kernel_size` = "3"), so that
    MLflow's run table can be filtered and grouped by the swept values."""
    return {f"{SWEPT_TAG_PREFIX}{key}": str(value) for key, value in trial.overrides.items()}


def _error_text(trial) -> str | None:
    """Tune writes the error to the trial's local staging folder first; storage gets it only at sync."""
    path = trial.error_file
    if path and Path(path).is_file():
        return Path(path).read_text()
    return trial.get_error()


def _last_error_line(trace: str | None) -> str:
    """The exception line of a Ray error trace ("ValueError: ..."), which is what a researcher needs first."""
    if not trace:
        return ""
    lines = [line.strip() for line in str(trace).strip().splitlines() if line.strip()]
    for line in reversed(lines):
        if "Error" in line.split(":")[0] or "Exception" in line.split(":")[0]:
            return line
    return lines[-1]

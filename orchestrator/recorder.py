"""The trial recorder: turns trial events into MLflow runs and console progress.

It runs on the driver only (Ray Tune calls it through `mlflow_callback.TuneRecorderCallback`; `--local`
mode calls it directly), which makes the driver the single writer of the tracking store.
"""

from __future__ import annotations

import time
from pathlib import Path

from .progress import Progress
from .tracking import STOPPED_EARLY_TAG, SWEPT_TAG_PREFIX, TRIAL_ID_TAG, StudyTracker, flatten
from .trials import Trial

FINAL_FLAG = "final"
# Result keys that are logged as metrics when the trial's final result arrives.
_PERIODIC_KEYS = ("train_loss", "lr", "val_loss")
_STRING_RESULT_KEYS = ("data_hash", "device", "ray_node_id", "error")


class TrialRecorder:
    """Events are keyed by `key`: the trial identity by default; under a sampling search Ray Tune's own trial
    id, since a searcher may sample the same configuration twice and each sample gets its own run."""

    def __init__(self, tracker: StudyTracker, progress: Progress, tags: dict[str, str]):
        self.tracker = tracker
        self.progress = progress
        self.common_tags = tags
        self.run_ids: dict[str, str] = {}  # trial id -> MLflow run id
        self.failed: dict[str, str] = {}  # trial id -> reason
        self.finished: set[str] = set()
        self.stopped_early: set[str] = set()
        self.got_final: set[str] = set()
        self.train_seconds: dict[str, float] = {}
        self.steps_run: dict[str, int] = {}
        self.worker_pids: dict[str, int] = {}
        self.retries: dict[str, int] = {}

    def start(self, trial: Trial, key: str | None = None) -> None:
        key = key or trial.trial_id
        if key not in self.run_ids:  # a retried trial keeps its run
            tags = {TRIAL_ID_TAG: trial.trial_id, "variant": trial.variant, "label": trial.label,
                    "seed": str(trial.seed), "baseline": str(trial.baseline).lower(),
                    "row_index": str(trial.index), **self.common_tags}
            # What this row changes on top of base (`swept.model.kernel_size` = "3"): MLflow's run table can
            # then be filtered and grouped by the swept values.
            tags.update({f"{SWEPT_TAG_PREFIX}{key}": str(value) for key, value in trial.overrides.items()})
            self.run_ids[key] = self.tracker.create_trial_run(trial.run_name, tags, flatten(trial.config))
        self.failed.pop(key, None)
        self.progress.trial_started(trial)

    def result(self, trial: Trial, result: dict, key: str | None = None) -> None:
        key = key or trial.trial_id
        run_id = self.run_ids[key]
        now = int(time.time() * 1000)
        step = int(result.get("step", 0))
        self.steps_run[key] = max(step, self.steps_run.get(key, 0))
        if not result.get(FINAL_FLAG):
            if "pid" in result and self.worker_pids.get(key) != result["pid"]:
                # Which process trains this trial, so that an operator (or a fault test) can find it.
                self.worker_pids[key] = result["pid"]
                self.tracker.set_tags(run_id, {"worker_pid": str(result["pid"])})
            self.tracker.log_metrics(run_id, {k: result[k] for k in _PERIODIC_KEYS if k in result}, step, now)
            if "train_loss" in result:  # validation results carry val_loss only
                self.progress.trial_step(trial, step, int(result.get("total_steps", 0)), result["train_loss"])
            return
        self.got_final.add(key)
        if result.get("error"):
            self.tracker.set_tags(run_id, {"error": str(result["error"])[:4000]})
            self.failed[key] = str(result["error"])
            return
        metrics = {key: value for key, value in result.items()
                   if isinstance(value, (int, float)) and not isinstance(value, bool) and _is_metric(key)
                   and key not in _PERIODIC_KEYS}  # those were logged step by step already
        self.tracker.log_metrics(run_id, metrics, step=step, timestamp_ms=now)
        perplexity = {int(key[4:]): value for key, value in metrics.items() if key[4:].isdigit() and key.startswith("ppl_")}
        if perplexity:
            self.tracker.log_series(run_id, "ppl_by_length", perplexity, timestamp_ms=now)
        self.tracker.set_tags(run_id, {k: result[k] for k in _STRING_RESULT_KEYS if result.get(k)})
        for path in result.get("artifacts") or []:  # attention heat maps (on a cluster: if this disk sees them)
            if Path(path).is_file():
                self.tracker.log_artifact(run_id, Path(path), "attention")
        # The trial's own work, for the overhead figure: training plus evaluation.
        self.train_seconds[key] = float(result.get("train_seconds", 0.0)) + float(result.get("eval_seconds", 0.0))
        accuracy = {name: value for name, value in metrics.items() if name.startswith(("che_acc_", "acc_"))}
        self.progress.trial_evaluated(trial, perplexity, accuracy)

    def complete(self, trial: Trial, key: str | None = None) -> None:
        key = key or trial.trial_id
        run_id = self.run_ids[key]
        if key in self.failed:  # the trial ended itself with a reason (e.g. a NaN loss)
            self.tracker.end_trial_run(run_id, "FAILED")
            self.progress.trial_failed(trial, self.failed[key])
            return
        if key not in self.got_final:  # a scheduler (ASHA) stopped it before its end
            self.stopped_early.add(key)
            self.tracker.set_tags(run_id, {STOPPED_EARLY_TAG: "true"})
        self.tracker.end_trial_run(run_id, "FINISHED")
        self.finished.add(key)
        self.progress.trial_finished(trial)

    def retry(self, trial: Trial, reason: str, key: str | None = None) -> None:
        """The trial crashed and Ray Tune restarts it; its run stays open and counts the attempts."""
        key = key or trial.trial_id
        self.retries[key] = self.retries.get(key, 0) + 1
        run_id = self.run_ids.get(key)
        if run_id:
            self.tracker.set_tags(run_id, {"retries": str(self.retries[key]), "last_crash": reason[:4000]})
        self.progress.message(f"{trial.run_name}: crashed ({reason}); retrying")

    def error(self, trial: Trial, reason: str, key: str | None = None) -> None:
        key = key or trial.trial_id
        run_id = self.run_ids.get(key)
        if run_id:
            self.tracker.set_tags(run_id, {"error": reason[:4000]})
            self.tracker.end_trial_run(run_id, "FAILED")
        self.failed[key] = reason
        self.progress.trial_failed(trial, reason)


def _is_metric(key: str) -> bool:
    bookkeeping = {FINAL_FLAG, "step", "total_steps", "training_iteration", "timestamp", "time_this_iter_s",
                   "time_total_s", "pid", "time_since_restore", "iterations_since_restore", "done"}
    return key not in bookkeeping

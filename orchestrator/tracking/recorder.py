"""The MLflow recorder: the listener of the trial events that writes them to the study's store, one nested
child run per trial. It runs on the driver only, which makes the driver the single writer of the tracking
store (an embedded SQLite store allows one)."""

from __future__ import annotations

import time
from pathlib import Path

from ..execution.protocol import PERIODIC_KEYS, STRING_RESULT_KEYS, final_metrics, perplexity_by_length
from .events import TrialFailed, TrialFinished, TrialListener, TrialResult, TrialRetried, TrialStarted
from .store import STOPPED_EARLY_TAG, SWEPT_TAG_PREFIX, TRIAL_ID_TAG, StudyStore, flatten

_TAG_LIMIT = 4000  # MLflow's tag values are bounded; reasons are cut to this


class MLflowRecorder(TrialListener):
    def __init__(self, store: StudyStore, tags: dict[str, str]):
        self.store = store
        self.common_tags = tags
        self.run_ids: dict[str, str] = {}  # event key -> MLflow run id
        self.worker_pids: dict[str, int] = {}

    def trial_started(self, event: TrialStarted) -> None:
        if event.key in self.run_ids:  # a retried trial keeps its run
            return
        trial = event.trial
        tags = {TRIAL_ID_TAG: trial.trial_id, "variant": trial.variant, "label": trial.label,
                "seed": str(trial.seed), "baseline": str(trial.baseline).lower(),
                "row_index": str(trial.index), **self.common_tags}
        # What this row changes on top of base (`swept.model.kernel_size` = "3"): MLflow's run table can
        # then be filtered and grouped by the swept values.
        tags.update({f"{SWEPT_TAG_PREFIX}{key}": str(value) for key, value in trial.overrides.items()})
        self.run_ids[event.key] = self.store.create_trial_run(trial.run_name, tags, flatten(trial.config))

    def trial_result(self, event: TrialResult) -> None:
        run_id, result, now = self.run_ids[event.key], event.result, int(time.time() * 1000)
        if not event.final:
            if "pid" in result and self.worker_pids.get(event.key) != result["pid"]:
                # Which process trains this trial, so that an operator (or a fault test) can find it.
                self.worker_pids[event.key] = result["pid"]
                self.store.set_tags(run_id, {"worker_pid": str(result["pid"])})
            self.store.log_metrics(run_id, {k: result[k] for k in PERIODIC_KEYS if k in result}, event.step, now)
            return
        if result.get("error"):
            self.store.set_tags(run_id, {"error": str(result["error"])[:_TAG_LIMIT]})
            return
        metrics = final_metrics(result)  # the periodic ones were logged step by step already
        self.store.log_metrics(run_id, metrics, step=event.step, timestamp_ms=now)
        perplexity = perplexity_by_length(metrics)
        if perplexity:
            self.store.log_series(run_id, "ppl_by_length", perplexity, timestamp_ms=now)
        self.store.set_tags(run_id, {k: result[k] for k in STRING_RESULT_KEYS if result.get(k)})
        for path in result.get("artifacts") or []:  # attention heat maps (on a cluster: if this disk sees them)
            if Path(path).is_file():
                self.store.log_artifact(run_id, Path(path), "attention")

    def trial_finished(self, event: TrialFinished) -> None:
        run_id = self.run_ids[event.key]
        if event.stopped_early:
            self.store.set_tags(run_id, {STOPPED_EARLY_TAG: "true"})
        self.store.end_trial_run(run_id, "FINISHED")

    def trial_failed(self, event: TrialFailed) -> None:
        run_id = self.run_ids.get(event.key)
        if run_id:
            self.store.set_tags(run_id, {"error": event.reason[:_TAG_LIMIT]})
            self.store.end_trial_run(run_id, "FAILED")

    def trial_retried(self, event: TrialRetried) -> None:
        run_id = self.run_ids.get(event.key)
        if run_id:
            self.store.set_tags(run_id, {"retries": str(event.attempt), "last_crash": event.reason[:_TAG_LIMIT]})

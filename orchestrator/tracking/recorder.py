"""The MLflow recorder: the listener of the trial events that writes them to the study's store, one nested
child run per trial. It runs on the driver only, which makes the driver the single writer of the tracking
store (an embedded SQLite store allows one).

A trial's run carries: its effective config as params (params.py: settings it does not read, or without a
value, are not logged; the resolved device and precision come with its final result), the values its row sweeps
as tags, its metrics (`train_loss`, `val_loss` and `lr` by step; the final ones at the last step; the by-length series
`ppl_by_length`, `delta_p_by_length`, `acc_by_length` whose step is the length, and the same values as the
table artifact `results_by_length.json`), and the files that make its page self-explanatory (run_files.py):
`trial_config.yaml` (a one-trial study file; rewritten once the trial
finished with the device and precision it ran on), `trial.log` and its data as dataset inputs. Its provenance
is in tags: the code (`mlflow.source.*`, `code_version`, `code_diff_sha256`: tracking/source.py, common to the
study's runs) and the trial process's environment (`env.python`, `env.torch`, ..., `env.device_model`,
`env.torch_threads`: dape_core/environment.py, reported with the final result). What the hardware did, sampled
by the trial's process, is in MLflow's system metrics (`system/cpu_utilization_percentage`, ..., one step per
sample) and, as means, in its final metrics (`mean_process_cpu_percentage`, `mean_gpu_utilization_percentage`).
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import dape_core.metric_names as names
from dape_core import ExperimentConfig
from dape_core.applicability import unused_settings

from ..study.code_identity import CodeFingerprint
from ..trial.protocol import (
    CHECKPOINT_SET_ASIDE_KEY,
    DATA_RECORD_KEY,
    ENVIRONMENT_KEY,
    LATER_EVALUATION_KEY,
    LOG_KEY,
    PERIODIC_KEYS,
    SERIES,
    STRING_RESULT_KEYS,
    SYSTEM_METRICS_KEY,
    WEIGHTS_FOLDER,
    WEIGHTS_KEY,
    decode_samples,
    evaluation_tag,
    final_metrics,
)
from . import run_files
from .checksums import checksum_tags
from .events import TrialFailed, TrialFinished, TrialInterrupted, TrialListener, TrialResult, TrialRetried, TrialStarted
from .params import resolved_params, start_params
from .sharing import DeviceSharing
from .source import CODE_VERSION_TAG
from .store import (
    CODE_FILE,
    CODE_TAG,
    ENV_TAG_PREFIX,
    INTERRUPTED_TAG,
    LIBRARY_TAG,
    STOPPED_EARLY_TAG,
    SWEPT_TAG_PREFIX,
    TEMPLATE_TAG,
    TRIAL_ID_TAG,
    WEIGHTS_TAG,
    StudyStore,
)

_TAG_LIMIT = 4000  # MLflow's tag values are bounded; reasons are cut to this


class MLflowRecorder(TrialListener):
    def __init__(self, store: StudyStore, tags: dict[str, str], resources: dict | None = None,
                 sharing: DeviceSharing | None = None, code: CodeFingerprint | None = None):
        """`resources`: the study's cpus/gpus per trial, written into each trial's one-trial study file.
        `sharing`: how many trials ran at once (sharing.py), logged with each trial's final metrics.
        `code`: the library's code fingerprint (study/code_identity.py): each trial run records its own part
        (`for_trial`: the core's files and its components'), its digest as the tag CODE_TAG and its per-file
        hashes as the artifact CODE_FILE; the library's digest is the tag LIBRARY_TAG."""
        self.store = store
        self.sharing = sharing
        self.common_tags = tags
        self.resources = resources
        self.code = code
        self.run_ids: dict[str, str] = {}  # event key -> MLflow run id
        self.worker_pids: dict[str, int] = {}
        self.system_steps: dict[str, int] = {}  # event key -> system-metric samples logged so far

    def trial_started(self, event: TrialStarted) -> None:
        if event.key in self.run_ids:  # a retried trial keeps its run
            return
        trial = event.trial
        tags = {TRIAL_ID_TAG: trial.trial_id, "variant": trial.variant, "label": trial.label,
                "seed": str(trial.seed), "baseline": str(trial.baseline).lower(),
                "row_index": str(trial.index), **self.common_tags}
        own = self.code.for_trial(trial.config) if self.code is not None else None
        if self.code is not None and own is not None:
            tags.update({CODE_TAG: own.digest, LIBRARY_TAG: self.code.digest})
        # What this row changes on top of base (`swept.model.kernel_size` = "3"): MLflow's run table can
        # then be filtered and grouped by the swept values.
        tags.update({f"{SWEPT_TAG_PREFIX}{key}": str(value) for key, value in trial.overrides.items()})
        if trial.template_id:
            tags[TEMPLATE_TAG] = trial.template_id
        run_id = self.store.create_trial_run(trial.run_name, tags, start_params(trial.config))
        self.run_ids[event.key] = run_id
        self._log_trial_config(run_id, trial)
        if own is not None:
            self._log_text(run_id, CODE_FILE, own.to_json())

    def _log_trial_config(self, run_id: str, trial, ran: dict[str, str] | None = None) -> None:
        """`trial_config.yaml`: written when the trial starts, and again with the device and precision it ran
        on once it has finished (run_files.ran_config)."""
        unused = sorted(unused_settings(ExperimentConfig(**trial.config)))
        text = run_files.trial_study_yaml(trial, self.store.study_name, self.resources, unused, ran)
        self._log_text(run_id, run_files.CONFIG_FILE, text)

    def _log_text(self, run_id: str, name: str, text: str) -> None:
        """`text` as the run's artifact `name`, through a file that is gone once the store has its copy."""
        with tempfile.TemporaryDirectory(prefix="orchestrator_run_file_") as folder:
            self.store.log_artifact(run_id, run_files.write_text(Path(folder), name, text))

    def trial_result(self, event: TrialResult) -> None:
        run_id, result, now = self.run_ids[event.key], event.result, int(time.time() * 1000)
        if result.get(LOG_KEY):
            self._log_text(run_id, run_files.LOG_FILE, result[LOG_KEY])
        if result.get(SYSTEM_METRICS_KEY):
            self._log_system_metrics(run_id, event.key, result[SYSTEM_METRICS_KEY])
        if not event.final:
            if result.get(CHECKPOINT_SET_ASIDE_KEY):  # the trial found an unreadable checkpoint and started over
                set_aside = str(result[CHECKPOINT_SET_ASIDE_KEY])[:_TAG_LIMIT]
                self.store.set_tags(run_id, {CHECKPOINT_SET_ASIDE_KEY: set_aside})
            if "pid" in result and self.worker_pids.get(event.key) != result["pid"]:
                # Which process trains this trial, so that an operator (or a fault test) can find it.
                self.worker_pids[event.key] = result["pid"]
                self.store.set_tags(run_id, {"worker_pid": str(result["pid"])})
            self.store.log_metrics(run_id, {k: result[k] for k in PERIODIC_KEYS if k in result}, event.step, now)
            return
        if result.get("error"):
            self.store.set_tags(run_id, {"error": str(result["error"])[:_TAG_LIMIT]})
            return
        self._final(run_id, event, now)

    def _log_system_metrics(self, run_id: str, key: str, text: str) -> None:
        """The hardware samples the trial's process took (execution/system_metrics.py), each at its own time, one
        step per sample of the run (MLflow's system metrics view plots them by step or time)."""
        first = self.system_steps.get(key, 0)
        samples = decode_samples(text)
        points = [(name, value, ms, first + offset)
                  for offset, (ms, values) in enumerate(samples) for name, value in values.items()]
        self.store.log_points(run_id, points)
        self.system_steps[key] = first + len(samples)

    def _final(self, run_id: str, event: TrialResult, now: int) -> None:
        result = event.result
        metrics = final_metrics(result)  # the periodic ones were logged step by step already
        if self.sharing is not None:
            metrics.update(self.sharing.metrics(event.key))
        self.store.log_metrics(run_id, metrics, step=event.step, timestamp_ms=now)
        for name, prefix in SERIES.items():
            points = names.by_length(metrics, prefix)
            if points:
                self.store.log_series(run_id, name, points, timestamp_ms=now)
        if result.get(LATER_EVALUATION_KEY):  # the report.lengths the trial scored: tagged as `evaluate` tags them
            self.store.set_tags(run_id, self._later_tag(json.loads(result[LATER_EVALUATION_KEY])))
        self.store.log_length_table(run_id)  # the same values as one table on the run's page
        self.store.log_params(run_id, resolved_params(result))
        if result.get("device") and result.get("precision"):
            self._log_trial_config(run_id, event.trial, {"device": result["device"], "precision": result["precision"]})
        self.store.set_tags(run_id, {k: result[k] for k in STRING_RESULT_KEYS if result.get(k)})
        if result.get(ENVIRONMENT_KEY):  # the trial process's versions, device model, threads: env.<key>
            environment = json.loads(result[ENVIRONMENT_KEY])
            self.store.set_tags(run_id, {f"{ENV_TAG_PREFIX}{k}": str(v)[:_TAG_LIMIT] for k, v in environment.items()})
        if result.get(DATA_RECORD_KEY):
            eval_split = None if event.trial.config.get("che") else event.trial.config["eval"]["split"]
            self.store.log_inputs(run_id, run_files.dataset_inputs(json.loads(result[DATA_RECORD_KEY]), eval_split))
        for path in result.get("artifacts") or []:  # attention heat maps (on a cluster: if this disk sees them)
            if Path(path).is_file():
                self.store.log_artifact(run_id, Path(path), "attention")
        self._log_weights(run_id, [Path(path) for path in result.get(WEIGHTS_KEY) or []])

    def _later_tag(self, later: dict) -> dict[str, str]:
        version = self.common_tags.get(CODE_VERSION_TAG, "")
        return evaluation_tag(later["lengths"], later["eval_section"], version=version,
                              eval_protocol=later["eval_protocol"], device=later["device"],
                              precision=later["precision"], threads=later["threads"], seconds=later["seconds"],
                              scored_by="trial")

    def _log_weights(self, run_id: str, files: list[Path]) -> None:
        """The trial's kept model (dape_core.stored) as the run's artifacts model/, its size as `weights_mb`,
        where it is as the tag WEIGHTS_TAG and each file's SHA-256 as a tag (checksums.py), in the one call that
        marks the model kept; the worker's copy is removed once the store has it."""
        files = [path for path in files if path.is_file()]
        if not files:
            return
        sums = checksum_tags(files)  # each file's SHA-256 as saved: evaluate, load_run and --verify check it
        for path in files:
            self.store.log_artifact(run_id, path, WEIGHTS_FOLDER)
        weights = next((path for path in files if path.suffix == ".safetensors"), files[0])
        self.store.log_metrics(run_id, {"weights_mb": weights.stat().st_size / 2**20}, 0, int(time.time() * 1000))
        self.store.set_tags(run_id, {**sums, WEIGHTS_TAG: f"{WEIGHTS_FOLDER}/{weights.name}"})
        for path in files:
            path.unlink(missing_ok=True)
        try:
            files[0].parent.rmdir()
        except OSError:  # not empty (another file beside them): left as it is
            pass

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

    def trial_interrupted(self, event: TrialInterrupted) -> None:
        run_id = self.run_ids.get(event.key)
        if run_id:
            self.store.set_tags(run_id, {INTERRUPTED_TAG: "true"})
            self.store.end_trial_run(run_id, "KILLED")

    def trial_retried(self, event: TrialRetried) -> None:
        run_id = self.run_ids.get(event.key)
        if run_id:
            self.store.set_tags(run_id, {"retries": str(event.attempt), "last_crash": event.reason[:_TAG_LIMIT]})

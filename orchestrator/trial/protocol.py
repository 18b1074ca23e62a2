"""What a trial reports, shared by the worker that reports it (trainable.py) and the driver that reads it
(tracking/): plain constants, so that the worker imports neither MLflow nor the driver's recorder.

A trial reports progress results (`step`, `total_steps`, `train_loss` and `lr`, or `val_loss`) and one final
result carrying FINAL_FLAG: its metrics (ppl_<L>, delta_p_<L>, ms_per_step, ...), provenance strings, and
`error` when the trial ended itself with a reason (a NaN loss).
"""

from __future__ import annotations

import json
import time

import dape_core.metric_names as names

# The isolated timings' prefix (dape_core.metric_names), read where both sides of a timing claim have them
# (judging/claims.py) and in the time table (reporting/timing_source.py).
ISOLATED_PREFIX = names.ISOLATED_PREFIX

FINAL_FLAG = "final"
LOG_KEY = "trial_log"  # the trial's log (text), with the final result or a last progress result before an error
DATA_RECORD_KEY = "data_record"  # JSON: source, path, split sizes, content hash (MLflow dataset inputs)
# JSON: the trial process's software and hardware (dape_core.environment.describe_environment): tags env.<key>
ENVIRONMENT_KEY = "environment"
# The files of the trial's kept model (dape_core.stored), logged by the driver as the run's artifacts WEIGHTS_FOLDER/.
WEIGHTS_KEY = "weights"
WEIGHTS_FOLDER = "model"
# JSON: the system-metric samples the trial's process took since its last result (execution/system_metrics.py),
# [[time in ms, {MLflow system metric: value}], ...] (`encode_samples`, `decode_samples`); the driver numbers
# them, one step per sample of the run.
SYSTEM_METRICS_KEY = "system_metrics"
# Logged step by step as they arrive (and so not again with the final result).
PERIODIC_KEYS = names.PERIODIC
# A progress result's text, sent once when the trial found its checkpoint unreadable and started over: a tag.
CHECKPOINT_SET_ASIDE_KEY = "checkpoint_set_aside"
# The evaluation protocol (dape_core.data.PROTOCOL_VERSION, docs/protocol.md) the run's per-length metrics
# (ppl_<L>, delta_p_<L>, without a `.k<tail>.n<windows>` suffix) were all measured under: a tag, set with the final
# result and again by `orchestrator evaluate`, which re-scores a whole row measured under an older one. A run
# without it was measured under protocol 1.
EVAL_PROTOCOL_TAG = "eval.protocol"
# One tag per `orchestrator evaluate` of a run (suffixed by when): JSON saying what, how and when (`evaluation_tag`).
EVALUATION_TAG_PREFIX = "orchestrator.evaluation."
# JSON, with a final result: the study's `report.lengths` the trial scored itself after its own evaluation
# (dape_core's LaterScores: lengths, eval section, protocol, device, precision, threads, seconds); the driver logs
# it as the evaluation tag `orchestrator evaluate` would have logged for them.
LATER_EVALUATION_KEY = "later_evaluation"
# The `eval:` settings an evaluation tag records (its `protocol`).
EVALUATION_PROTOCOL_KEYS = ("tail_tokens", "n_windows", "tokens_per_length", "batch_size", "split", "seed")
# The trial's checkpoint files (paths), with its final result: the driver removes them once the result is recorded
# (execution/checkpoints.py), so that a stop in between resumes the trial at its last step instead of retraining.
CHECKPOINT_FILES_KEY = "checkpoint_files"
# The driver's code fingerprint's per-file hashes (study/code_identity.py), as JSON in every trial's config: the trial's
# process compares its files on disk with them (execution/trainable.py CodeGuard).
CODE_FILES_KEY = "code_files"
# Final-result values that are text: logged as tags.
STRING_RESULT_KEYS = ("data_hash", "device", "precision", "attention_kernels", "ray_node_id", "worker_node_ids",
                      "error", EVAL_PROTOCOL_TAG)
# Series logged by the driver from the final per-length metrics, their step being the length (evaluation or
# test length): name -> the prefix of the per-length metrics they are made of.
SERIES = names.SERIES
# Bookkeeping of the protocol and of Ray Tune, never metrics.
BOOKKEEPING_KEYS = frozenset({FINAL_FLAG, "step", "total_steps", "training_iteration", "timestamp",
                              "time_this_iter_s", "time_total_s", "pid", "time_since_restore",
                              "iterations_since_restore", "done"})


def final_metrics(result: dict) -> dict[str, float]:
    """The numeric metrics of a final result, without bookkeeping and without the periodic keys."""
    return {key: value for key, value in result.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool)
            and key not in BOOKKEEPING_KEYS and key not in PERIODIC_KEYS}


def perplexity_by_length(metrics: dict[str, float]) -> dict[int, float]:
    return names.by_length(metrics, names.PPL)


def accuracies(metrics: dict[str, float]) -> dict[str, float]:
    return {name: value for name, value in metrics.items() if name.startswith(names.ACCURACY_PREFIXES)}


def measured_under(tags: dict[str, str]) -> int:
    """The evaluation protocol a run's per-length metrics were measured under: its tag, else 1 (runs before it)."""
    text = tags.get(EVAL_PROTOCOL_TAG, "1")
    return int(text) if text.isdigit() else 1


def evaluation_tag(lengths: list[int], eval_section: dict, *, version: str, eval_protocol, device, precision, threads,
                   seconds: float, suffix: str = "", visualise: bool = False, time_it: bool = False,
                   **more) -> dict[str, str]:
    """The tag of one evaluation of a run's `lengths` (`orchestrator evaluate`, `orchestrator run`'s report.lengths,
    whether a task or the trial scored them): `orchestrator.evaluation.<UTC stamp>` = JSON saying what, how and
    when; `more`: further entries (a timing's)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    what = {"lengths": lengths, "protocol": {key: eval_section.get(key) for key in EVALUATION_PROTOCOL_KEYS},
            "metric_suffix": suffix, "eval_protocol": eval_protocol, "visualise": visualise, "time": time_it,
            "code_version": version, "when": stamp, "device": device, "precision": precision, "threads": threads,
            "seconds": round(seconds or 0.0, 3), **more}
    return {f"{EVALUATION_TAG_PREFIX}{stamp}": json.dumps(what)[:4000]}


def evaluated_later(tags: dict[str, str]) -> set[int]:
    """The lengths `orchestrator evaluate` scored for a run's own protocol (unsuffixed metrics), from its
    evaluation tags: under protocol 1, those were scored on other text than the run's other lengths."""
    lengths: set[int] = set()
    for key, text in tags.items():
        if not key.startswith(EVALUATION_TAG_PREFIX):
            continue
        try:
            what = json.loads(text)
        except ValueError:  # a tag cut at MLflow's limit: its lengths come first, but the JSON is unreadable
            continue
        if isinstance(what, dict) and not what.get("metric_suffix"):
            lengths.update(int(length) for length in what.get("lengths") or [])
    return lengths


Sample = tuple[int, dict[str, float]]  # (time in ms, {MLflow system metric: value})


def encode_samples(samples: list[Sample]) -> str:
    return json.dumps([[ms, values] for ms, values in samples])


def decode_samples(text: str) -> list[Sample]:
    """What `encode_samples` made."""
    return [(int(ms), {key: float(value) for key, value in values.items()}) for ms, values in json.loads(text)]

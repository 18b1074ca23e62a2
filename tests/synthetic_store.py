"""A study's MLflow store written without training: every trial of the study file recorded through the
orchestrator's own tracking code (TrialEvents -> MLflowRecorder -> StudyStore, as a real run records it)
with synthetic but realistically shaped results: a decaying training-loss curve logged step by step,
perplexity growing past the training length, ΔP, timings, parameter counts. For report benchmarks and
report-equality checks at sizes no test could train (tests/benchmarks/bench_report_scale.py)."""

from __future__ import annotations

import hashlib
import math

from orchestrator import Study, expand
from orchestrator.tracking.recorder import MLflowRecorder
from orchestrator.tracking.store import StudyStore

LOG_POINTS = 10  # training-loss points per trial


def _noise(*parts) -> float:
    """A deterministic value in [-1, 1) from the trial's identity (so a rebuilt store has the same numbers)."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**63 - 1.0


def synthetic_result(trial, later: tuple[int, ...] = ()) -> dict:
    """A final result shaped like dape_core's (ExperimentResult.metrics) for this trial's config; its numbers
    depend on what the trial reads alone (its effective params), as a real trial's do. `later`: lengths scored
    after training (the study's report.lengths, as `orchestrator run` scores them), with the same curve."""
    from orchestrator.tracking.params import effective_params

    config = trial.config
    key = repr(sorted((k, repr(v)) for k, v in effective_params(config).items() if not k.startswith("distributed.")))
    train_length = (config["model"]["train_length"] if config["model"].get("train_length")
                    else config["train"]["seq_len"])
    lengths = [int(length) for length in [*config["eval"]["lengths"], *later]] if not config.get("che") else []
    quality = 1.0 + 0.1 * _noise(key, "quality")
    ppl = {length: 30.0 * quality * (1 + 0.4 * math.log2(max(length / train_length, 1.0)) ** 2)
           for length in lengths}
    at_train = ppl.get(train_length, min(ppl.values()) if ppl else 1.0)
    result = {"done_flag": 1, "train_loss": math.log(30.0 * quality), "train_seconds": 100 + 10 * _noise(key, "t"),
              "eval_seconds": 5.0,
              "tokens_seen": config["train"]["steps"] * config["train"]["batch_size"] * config["train"]["seq_len"],
              "num_parameters": 1_000_000 + 1000 * config["model"].get("d_dape", 0), "flops_per_token": 6e6,
              "peak_memory_mb": 900.0, "ms_per_step": 20.0 + _noise(key, "ms")}
    result.update({f"ppl_{length}": value for length, value in ppl.items()})
    result.update({f"delta_p_{length}": value - at_train for length, value in ppl.items()})
    result.update({f"ms_forward_{length}": 0.01 * length for length in lengths})
    if config.get("che"):
        accuracy = 0.5 + 0.2 * _noise(key, "acc")
        result.update({"che_acc_train": accuracy + 0.1, "che_acc_test": accuracy})
    return result


def write_store(study: Study, tracking_uri: str, later: bool = False) -> StudyStore:
    """Record every distinct trial of `study` (grid studies) as FINISHED with a synthetic result. The run,
    its tags, params and config file are the recorder's (MLflowRecorder.trial_started); the metrics, the
    loss curve included, go in one batch per run (a real trial logs them as it goes: same values, fewer
    calls), the per-length series as the recorder logs them."""
    from mlflow.entities import Metric

    from dape_core.evaluate.config import PROTOCOL_VERSION
    from dape_core.metric_names import by_length as series
    from orchestrator.tracking.events import TrialStarted
    from orchestrator.tracking.params import resolved_params
    from orchestrator.trial.protocol import EVAL_PROTOCOL_TAG, SERIES

    store = StudyStore.create(tracking_uri, study.name)
    store.start_parent({"description": study.description[:4000], "code_version": "synthetic"})
    recorder = MLflowRecorder(store, {"code_version": "synthetic", "study": study.name})
    from orchestrator.trial.trials import distinct  # one trial per identity
    now = 1_700_000_000_000
    for trial in distinct(expand(study)):
        recorder.trial_started(TrialStarted(trial, trial.trial_id))
        run_id = recorder.run_ids[trial.trial_id]
        steps = trial.config["train"]["steps"]
        own = [int(length) for length in trial.config.get("eval", {}).get("lengths", [])]
        train_length = trial.config["model"].get("train_length") or trial.config["train"]["seq_len"]
        final = synthetic_result(trial, tuple(study.report.later_lengths(train_length, own)) if later else ())
        final.pop("done_flag")
        metrics = [Metric("train_loss", final["train_loss"] + 3.0 * math.exp(-4 * point / LOG_POINTS), now,
                          max(1, steps * point // LOG_POINTS)) for point in range(1, LOG_POINTS)]
        metrics += [Metric(key, float(value), now, steps) for key, value in final.items()]
        metrics += [Metric(name, float(value), now, length) for name, prefix in SERIES.items()
                    for length, value in series(final, prefix).items()]
        store.client.log_batch(run_id, metrics=metrics)
        store.log_params(run_id, resolved_params({"device": "cpu", "precision": "fp32"}))
        store.set_tags(run_id, {"device": "cpu", "precision": "fp32", "data_hash": "synthetic",
                                **({EVAL_PROTOCOL_TAG: str(PROTOCOL_VERSION)} if not trial.config.get("che") else {})})
        store.end_trial_run(run_id, "FINISHED")
    store.end_parent("FINISHED")
    return store

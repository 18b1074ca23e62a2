"""What runs where a stored trial is evaluated (a Ray task, or this process with `--local`): fetch its kept model,
evaluate it with the requested protocol (`dape_core.experiment.evaluate_stored`) or time it alone
(`dape_core.evaluate.isolated`), and return the metrics. It trains nothing and writes nothing to MLflow: the
driver, the single writer, logs what it returns. Reading the artifacts of a run on a remote store (S3 through
the tracking server) downloads them into a temporary folder removed afterwards."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
from pathlib import Path
from urllib.parse import unquote, urlparse

import dape_core.metric_names as names

from ..trial.protocol import WEIGHTS_FOLDER


class StoredDataChanged(RuntimeError):
    """The data the trial was trained and evaluated on is not the data found now."""


def weights_folder(artifact_uri: str, tracking_uri: str | None = None) -> tuple[Path, str | None]:
    """(the folder of a run's kept model, a temporary folder to remove afterwards or None). Local artifact
    stores are read in place; others are downloaded through MLflow."""
    uri = f"{artifact_uri.rstrip('/')}/{WEIGHTS_FOLDER}"
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return Path(unquote(parsed.path)), None
    import mlflow.artifacts

    temporary = tempfile.mkdtemp(prefix="orchestrator_weights_")
    try:
        local = mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=temporary, tracking_uri=tracking_uri)
    except Exception:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return Path(local), temporary


def evaluate_task(task: dict) -> dict:
    """Evaluate (or time) one stored trial; returns {"metrics", "artifacts", "eval_protocol" (where lengths were
    scored), "device", "precision", "seconds", "threads"}. Raises dape_core.stored.WeightsUnreadable (naming the file)
    for damaged weights."""
    import torch

    from dape_core.allocator import keep_freed_memory
    from dape_core.data import anchored, load_corpus
    from dape_core.experiment import evaluate_stored, visualise
    from dape_core.plugins import load_shipped
    from dape_core.stored import load_model, read_config
    from dape_core.train import resolve_device, resolve_precision

    started, began = time.perf_counter(), time.time()
    torch.set_num_threads(task["threads"])
    keep_freed_memory()  # the long maps are reallocated every window (dape_core/allocator.py)
    load_shipped(task.get("plugins") or ())  # the study's plugins: the stored config names their components
    folder, temporary = weights_folder(task["artifact_uri"], task.get("tracking_uri"))
    try:
        device = resolve_device(read_config(folder).train.device)
        stored = load_model(folder, device, task.get("checksums") or None)  # refused if changed since saved
        cfg = stored.config
        if cfg.che is not None:  # a CHE model: its accuracy at new test lengths (the task is generated, no corpus)
            return _che(stored, task, device, started, began)
        cfg = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, **_eval_changes(task["eval_section"])))
        if task.get("launch_dir"):
            cfg = dataclasses.replace(cfg, data=anchored(cfg.data, task["launch_dir"]))
        corpus = load_corpus(cfg.data)
        if stored.data_hash and corpus.content_hash != stored.data_hash:
            raise StoredDataChanged(f"the data of run {task['run_id']} had content hash {stored.data_hash}; the data "
                                    f"found now ({cfg.data.source} {cfg.data.path or ''}) has {corpus.content_hash}: "
                                    "it changed since the trial ran, so its scores would not compare")
        same_kind = task.get("device") and task["device"].split(":")[0] == device.type
        precision = task.get("precision") if same_kind else None
        metrics, artifacts, protocol = {}, [], None
        if task["lengths"]:
            scored = evaluate_stored(stored.model, dataclasses.replace(cfg, eval=dataclasses.replace(
                cfg.eval, timing=False, visualise=False)), None, corpus, precision, lengths=task["lengths"])
            metrics.update(_named(scored, task["lengths"], task["suffix"]))
            protocol = scored["eval_protocol"]
        if task.get("visualise"):  # the maps alone: drawing them never scores the lengths again
            artifacts = visualise(stored.model, cfg, corpus, tempfile.mkdtemp(prefix="orchestrator_attention_"),
                                  max(task["lengths"] or cfg.eval.lengths))
        if task.get("time"):
            metrics.update(_isolated(stored.model, cfg, corpus, resolve_precision(precision or cfg.train.precision,
                                                                                  device), task))
        return {"metrics": metrics, "artifacts": artifacts, "eval_protocol": protocol, "device": str(device),
                "precision": resolve_precision(precision or cfg.train.precision, device).name,
                "seconds": time.perf_counter() - started, "threads": torch.get_num_threads(),
                "began": began, "ended": time.time(), "pid": os.getpid()}
    finally:
        if temporary:
            shutil.rmtree(temporary, ignore_errors=True)


def _che(stored, task: dict, device, started: float, began: float) -> dict:
    import torch

    from dape_core.experiment import evaluate_stored_che
    from dape_core.train import resolve_precision

    same_kind = task.get("device") and task["device"].split(":")[0] == device.type
    precision = resolve_precision((task.get("precision") if same_kind else None) or stored.config.train.precision,
                                  device)
    accuracy = evaluate_stored_che(stored.model, stored.config, task["lengths"], precision.name)
    return {"metrics": {names.per_length(names.ACC, length): value for length, value in accuracy.items()},
            "artifacts": [], "device": str(device), "precision": precision.name,
            "seconds": time.perf_counter() - started, "threads": torch.get_num_threads(), "began": began,
            "ended": time.time(), "pid": os.getpid()}


def _eval_changes(section: dict) -> dict:
    keys = ("lengths", "tail_tokens", "n_windows", "tokens_per_length", "visualise")
    return {key: section[key] for key in keys if key in section}


def _named(scored: dict, lengths: list[int], suffix: str) -> dict[str, float]:
    """ppl_<L> and delta_p_<L> of the lengths asked for. The evaluation's batch times are not logged: they were
    not taken alone (use --time), and would sit beside in-training `ms_forward_<L>` as if alike."""
    out = {}
    for length in lengths:
        out[names.per_length(names.PPL, length) + suffix] = scored["perplexity"][length]
        if length in scored["delta_p"]:
            out[names.per_length(names.DELTA_P, length) + suffix] = scored["delta_p"][length]
    return out


def _isolated(model, cfg, corpus, precision, task: dict) -> dict[str, float]:
    from dape_core.evaluate.isolated import time_forward, time_training_step
    from dape_core.experiment import protocol_windows

    warmup, repeats = task.get("warmup", 5), task.get("repeats", 20)
    out = {}
    step = time_training_step(model, cfg, corpus, precision, warmup, repeats)
    out.update({names.isolated(names.MS_PER_STEP) + suffix: step[key] for key, suffix in _PARTS.items()})
    lengths = task.get("timed_lengths") or cfg.eval.lengths
    timed_cfg = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, lengths=sorted(lengths)))
    windows = protocol_windows(timed_cfg, corpus)  # what is timed is the batch's shape, not which text it holds
    own = {length: windows[length] for length in lengths}
    for length, figures in time_forward(model.eval(), own, cfg, precision, max(1, warmup // 2), repeats).items():
        out.update({names.isolated(names.per_length(names.MS_FORWARD, length)) + suffix: figures[key]
                    for key, suffix in _PARTS.items()})
    out[names.ISOLATED_REPEATS] = repeats
    return out


# The isolated timings' figures and their names' suffixes: the median is the timing, the quartiles beside it.
_PARTS = {"median": "", "q1": names.QUARTILE_SUFFIXES[0], "q3": names.QUARTILE_SUFFIXES[1]}

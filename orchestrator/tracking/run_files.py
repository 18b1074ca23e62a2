"""What a trial's MLflow run carries besides params and metrics, so that its page alone says how to reproduce
it and what it measured: the resolved config as a one-trial study file (`trial_config.yaml`), the trial's log
(`trial.log`), its data as MLflow dataset inputs (source, content hash as digest, split), and its results by
evaluation length as a table (`results_by_length.json`: MLflow's table artifact, which its UI shows as a table
rather than as a chart whose x axis is the `Step`)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import yaml

import dape_core.metric_names as names

from ..trial.trials import Trial

CONFIG_FILE = "trial_config.yaml"
LOG_FILE = "trial.log"
LENGTH_TABLE_FILE = "results_by_length.json"
LENGTH_COLUMNS = (names.PPL, names.DELTA_P, names.ACC, names.MS_FORWARD)  # the table's columns, by prefix


def length_table(metrics: dict[str, float]) -> dict | None:
    """A run's per-length results as one table, in the JSON form MLflow's `log_table` writes (pandas'
    orient="split": {"columns": [...], "data": [[...], ...]}): a line per length, a column per metric family
    the run has (perplexity, ΔP, accuracy, ms per forward), None where it has none (a cell it lacks: null)."""
    found = {prefix: names.by_length(metrics, prefix) for prefix in LENGTH_COLUMNS}
    found = {prefix: values for prefix, values in found.items() if values}
    if not found:
        return None
    lengths = sorted(set().union(*found.values()))
    return {"columns": ["length"] + [prefix.rstrip("_") for prefix in found],
            "data": [[length] + [values.get(length) for values in found.values()] for length in lengths]}


def ran_config(config: dict, ran: dict[str, str] | None) -> dict:
    """The trial config with `train.device` and `train.precision` as the trial ran (`ran`: its final result's
    device and precision), where it asked for "auto": a rerun on another machine then asks for the same ones
    rather than resolving "auto" again. A GPU is named without its index (the process's own, `cuda`): under
    Ray each trial sees its GPU as cuda:0, and each rank of a multi-worker trial its own."""
    if not ran:
        return config
    train = dict(config.get("train") or {})
    if ran.get("device") and train.get("device") == "auto":
        train["device"] = "cuda" if str(ran["device"]).startswith("cuda") else str(ran["device"])
    if ran.get("precision") and train.get("precision") == "auto":
        train["precision"] = str(ran["precision"])
    return {**config, "train": train}


def trial_study(trial: Trial, study_name: str, resources: dict[str, Any] | None = None,
                ran: dict[str, str] | None = None) -> dict:
    """A study file with this one trial: its effective config as `base`, its label and seed. Expanding it
    gives the same config, hence the same trial identity; with `ran` (the device and precision the trial ran
    on, known once it finished: `ran_config`) the config as run, whose identity differs where the study
    asked for "auto". The seed is `seeds:`, the only place a study file may set train.seed (study
    validation), so `base` leaves it out."""
    base = ran_config(dict(trial.config), ran)
    if "train" in base:
        base["train"] = {key: value for key, value in base["train"].items() if key != "seed"}
    how = f" (device {base['train']['device']}, precision {base['train']['precision']})" if ran else ""
    document = {"name": f"{study_name}-trial-{trial.trial_id}",
                "description": f'Trial "{trial.run_name}" of study {study_name}, as it ran{how}.',
                "base": base, "variants": [{"label": trial.label}], "seeds": [trial.seed]}
    if resources:
        document["resources"] = resources
    return document


def trial_study_yaml(trial: Trial, study_name: str, resources: dict[str, Any] | None = None,
                     unused: list[str] | None = None, ran: dict[str, str] | None = None) -> str:
    """`ran`: the device and precision the trial ran on (its final result); None before it has run, when
    train.device and train.precision are still what the study asked for."""
    if ran:
        resolved = ["# config, every field resolved (train.device and train.precision as the trial ran; the study",
                    f"# asked for {trial.config['train']['device']} / {trial.config['train']['precision']}), "
                    "as a one-trial study file.",
                    f"# Rerun it:     orchestrator run {CONFIG_FILE}   (the same config; on the same CPU machine, the",
                    "#               same numbers bit for bit)"]
    else:
        resolved = ["# config as the study asked for it (the trial has not finished: train.device and",
                    "# train.precision are resolved when it has), as a one-trial study file.",
                    f"# Rerun it:     orchestrator run {CONFIG_FILE}   (same config, same trial id)"]
    header = [f'# Trial "{trial.run_name}" of study {study_name} (trial id {trial.trial_id}): its effective',
              *resolved,
              "# From Python:  from dape_core import ExperimentConfig, run_experiment",
              f"#               study = yaml.safe_load(open('{CONFIG_FILE}'))",
              "#               study['base']['train']['seed'] = study['seeds'][0]",
              "#               run_experiment(ExperimentConfig(**study['base']))"]
    if unused:
        header += textwrap.wrap(f"Not read by this trial (its params say n/a): {', '.join(sorted(unused))}", 108,
                                initial_indent="# ", subsequent_indent="#   ")
    body = yaml.safe_dump(trial_study(trial, study_name, resources, ran), sort_keys=False, allow_unicode=True)
    return "\n".join(header) + "\n" + body


def write_text(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def _embedded_corpus() -> dict:
    """Where the `stdlib` source's text comes from: the snapshot shipped with dape_core, by name and SHA-256."""
    from dape_core.data.snapshot import SNAPSHOT, SNAPSHOT_SHA256

    return {"embedded": SNAPSHOT.name, "archive_sha256": SNAPSHOT_SHA256}


def dataset_inputs(record: dict, eval_split: str | None) -> list:
    """MLflow dataset inputs of a trial's data record (dape_core's `ExperimentResult.data_record`): the
    training split and the evaluated split, each a dataset named `<data>:<split>` whose digest is the
    content hash of the text or token file, with its source and the split's size as profile."""
    from mlflow.entities import Dataset, DatasetInput, InputTag

    source = record.get("source", "unknown")
    if source == "che":
        dataset = Dataset(name=f"che:{record.get('task')}", digest=str(record.get("content_hash", ""))[:36],
                          source_type="generated", source=json.dumps({k: record.get(k) for k in
                                                                      ("task", "form", "train_max_length",
                                                                       "test_lengths")}, default=str))
        return [DatasetInput(dataset, [InputTag("mlflow.data.context", "training")])]
    path = record.get("path")
    name = "stdlib" if source == "stdlib" else Path(str(path)).name
    where = {"uri": Path(str(path)).resolve().as_uri()} if path else _embedded_corpus()
    inputs = []
    for split, context in (("train", "training"), (eval_split, "evaluation")):
        if not split:
            continue
        profile = {"split": split, "tokens": (record.get("tokens") or {}).get(split),
                   "split_seed": record.get("split_seed"), "val_fraction": record.get("val_fraction"),
                   "test_fraction": record.get("test_fraction"), "tokenizer": record.get("tokenizer"),
                   "vocab_size": record.get("vocab_size")}
        dataset = Dataset(name=f"{name}:{split}", digest=str(record.get("content_hash", "")),
                          source_type="local" if path else "embedded",
                          source=json.dumps({**where, "source": source}), profile=json.dumps(profile))
        inputs.append(DatasetInput(dataset, [InputTag("mlflow.data.context", context)]))
    return inputs

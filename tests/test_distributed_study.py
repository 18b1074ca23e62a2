"""Multi-worker trials in a study: the trial size in `resources` and in a trial's `distributed` section, the
plan's memory per worker, and a study mixing a one-worker and a two-worker trial through `orchestrator run`
on the local Ray (Ray Tune trials, one of them a Ray Train TorchTrainer of two gloo workers) into a real
MLflow SQLite store: one child run per trial, with its size as params."""

from __future__ import annotations

import re

import pytest
import yaml
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from dape_core import ExperimentConfig
from orchestrator import expand, load_study, parse_study
from orchestrator.cli import app
from orchestrator.planning.estimate import estimate

BASE = {
    "model": {"preset": "tiny", "pos_encoding": "kerple", "d_dape": 8},
    "data": {"max_files": 60},
    "train": {"steps": 6, "batch_size": 8, "seq_len": 32, "log_every": 3},
    "eval": {"lengths": [32, 64], "tail_tokens": 16, "n_windows": 4, "timing": False},
}


def test_the_trial_size_comes_from_resources_unless_a_row_sets_its_own():
    study = parse_study({"name": "sizes", "base": BASE, "resources": {"workers": 2, "parallelism": "fsdp"},
                         "variants": [{"label": "Kerple", "set": {"model.processor": "none"}},
                                      {"label": "DAPE",
                                       "set": {"model.processor": "dapev2", "distributed.workers": 1}}]})
    kerple, dape = expand(study)
    assert kerple.config["distributed"] == {"workers": 2, "parallelism": "fsdp"}
    assert dape.config["distributed"] == {"workers": 1, "parallelism": "fsdp"}


def test_the_size_of_a_trial_is_not_its_identity():
    one = expand(parse_study({"name": "s", "base": BASE}))[0]
    eight = expand(parse_study({"name": "s", "base": BASE, "resources": {"workers": 8}}))[0]
    assert one.config != eight.config and one.trial_id == eight.trial_id


def test_local_mode_refuses_multi_worker_trials_and_runs_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "wide.yaml"
    path.write_text(yaml.safe_dump({"name": "wide", "base": BASE, "resources": {"workers": 2}}))
    result = CliRunner().invoke(app, ["run", str(path), "--local"])
    assert result.exit_code == 2, result.output
    assert "--local runs every trial in this process, on one worker; wide (2 workers) need several" in result.output
    assert not (tmp_path / "mlruns").exists()


def test_memory_per_worker_follows_the_parallelism():
    def memory(workers: int, parallelism: str) -> float:
        cfg = ExperimentConfig(model={"preset": "350M", "pos_encoding": "kerple"},
                               train={"batch_size": 32, "seq_len": 512},
                               eval={"lengths": [512]}, distributed={"workers": workers, "parallelism": parallelism})
        return estimate(cfg, gpus=1, cpus=8).peak_memory_bytes

    parameters = ExperimentConfig(model={"preset": "350M"}).model.num_parameters()
    one, ddp, fsdp = memory(1, "ddp"), memory(8, "ddp"), memory(8, "fsdp")
    # DDP: a full replica (16 B/param) and its gradient buckets, activations of 32 / 8 sequences.
    assert one - ddp == pytest.approx(7 / 8 * (one - 16 * parameters) - 4 * parameters, rel=1e-9)
    # FSDP: the replica's 16 B/param split over 8, plus one block gathered: below DDP by most of the replica.
    assert ddp - fsdp > 0.8 * (16 + 4 - 16 / 8) * parameters
    assert memory(2, "fsdp") > fsdp


def test_plan_of_the_paper_model_sizes_fits_every_size_with_its_workers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from pathlib import Path

    study = Path(__file__).parents[1] / "studies" / "model_size.yaml"
    data = {trial.config["data"][key] for trial in expand(load_study(study, profile="paper"))
            for key in ("path", "tokenizer")}
    for file in data:  # stand-ins for the paper's corpus, which plan checks exists (it reads none of it)
        (tmp_path / file).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / file).write_bytes(b"{}")
    result = CliRunner().invoke(app, ["plan", str(study), "--profile", "paper"])
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if re.match(r"^│ \d", line)]
    assert len(rows) == 8
    for row in rows:
        cells = [cell.strip() for cell in row.strip("│").split("│")]
        preset = re.search(r"preset=([\d.]+[MB])", cells[1]).group(1)
        workers, memory, fits = cells[5], cells[6], cells[7]
        assert fits == "yes" and float(memory.split()[0]) <= 80, row
        assert workers == {"125M": "1", "350M": "4 x fsdp", "2.7B": "8 x fsdp", "6.7B": "8 x fsdp"}[preset], row
    assert "do not fit" not in result.output


@pytest.mark.slow
def test_a_study_mixes_one_and_two_worker_trials(tmp_path, local_ray, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = {"name": "mixed_sizes", "base": BASE,
            "variants": [{"label": "Kerple", "baseline": True, "set": {"model.processor": "none"}},
                         {"label": "DAPE-Kerple", "set": {"model.processor": "dapev2", "model.kernel_size": 3,
                                                          "distributed.workers": 2}}],
            "resources": {"cpus": 1, "max_retries": 0, "parallelism": "fsdp"}}
    path = tmp_path / "mixed_sizes.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = CliRunner().invoke(app, ["run", str(path), "--tracking-uri", uri,
                                      "--reports-dir", str(tmp_path / "reports"),
                                      "--storage-dir", str(tmp_path / "state")])
    assert result.exit_code == 0, result.output

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("mixed_sizes")
    runs = client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'trial'")
    by_label = {run.data.tags["label"]: run for run in runs}
    assert sorted(by_label) == ["DAPE-Kerple", "Kerple"]  # one child run per trial, not one per worker
    assert all(run.info.status == "FINISHED" for run in runs)
    for label, workers in (("Kerple", "1"), ("DAPE-Kerple", "2")):
        run = by_label[label]
        assert run.data.params["distributed.workers"] == workers
        assert run.data.params["distributed.parallelism"] == "fsdp"
        # Rank 0 alone reported: each logged step once, and the evaluation once.
        history = client.get_metric_history(run.info.run_id, "train_loss")
        assert [m.step for m in history] == [3, 6]
        assert {"ppl_32", "ppl_64"} <= set(run.data.metrics)
        assert len(client.get_metric_history(run.info.run_id, "ppl_32")) == 1
    wide = by_label["DAPE-Kerple"]
    node_ids = wide.data.tags["worker_node_ids"].split(",")
    assert len(node_ids) == 2 and all(re.fullmatch(r"[0-9a-f]{56}", node) for node in node_ids)
    assert "worker_node_ids" not in by_label["Kerple"].data.tags
    assert wide.data.metrics["tokens_seen"] == 6 * 8 * 32  # both workers' tokens: the global batch
    # Finished: the sharded checkpoints of the trial are gone, like a one-worker trial's trainer.pt.
    folder = tmp_path / "state" / "checkpoints" / wide.data.tags["orchestrator.trial_id"]
    assert not (folder / "sharded").exists() and not (folder / "trainer.pt").exists()
    # Its kept model was gathered from the shards: it loads on one device and scores what the trial logged.
    from dape_core.experiment import evaluate_stored
    from orchestrator.evaluation.stored import load_run

    stored = load_run(wide.info.run_id, uri)
    scored = evaluate_stored(stored.model, stored.config)
    assert scored["perplexity"][64] == pytest.approx(wide.data.metrics["ppl_64"], rel=1e-6)

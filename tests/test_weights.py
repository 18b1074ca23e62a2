"""Trial weights kept: a finished trial's model (safetensors weights, effective config, data hash) is an artifact
of its MLflow run, loads back for a notebook by path or run id and computes exactly what the trained model did;
damaged files are named; `keep_weights: none` keeps nothing; `plan` shows the size per trial."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from dape_core import ExperimentConfig, build_model
from dape_core.stored import CONFIG_FILE, WEIGHTS_FILE, WeightsUnreadable, load_model, save_model, weights_bytes
from orchestrator import parse_study
from orchestrator.cli import app
from orchestrator.evaluation.stored import load_run
from orchestrator.tracking.store import WEIGHTS_TAG

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BASE = {"model": {"preset": "tiny", "pos_encoding": "kerple", "d_dape": 8, "processor": "dapev2", "kernel_size": 3},
        "data": {"max_files": 60}, "train": {"steps": 6, "batch_size": 4, "seq_len": 32, "log_every": 3},
        "eval": {"lengths": [32, 64], "tail_tokens": 16, "n_windows": 4, "timing": False}}


def _config() -> ExperimentConfig:
    return ExperimentConfig(**BASE)


def test_a_saved_model_loads_with_its_config_and_computes_the_same(tmp_path):
    cfg = _config()
    torch.manual_seed(3)
    model = build_model(cfg.model)
    files = save_model(model, cfg, "abc123", {"source": "stdlib"}, tmp_path)
    assert sorted(path.name for path in files) == ["checksums.json", "config.json", "data.json", "model.safetensors"]
    assert (tmp_path / WEIGHTS_FILE).read_bytes()[:8] != b"PK\x03\x04"  # not a torch (zip/pickle) file
    stored = load_model(tmp_path)
    assert stored.config == cfg and stored.data_hash == "abc123"
    assert json.loads((tmp_path / "data.json").read_text())["content_hash"] == "abc123"
    tokens = torch.randint(0, cfg.model.vocab_size, (2, 40))
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(tokens), stored.model(tokens))
    assert not stored.model.training


def test_damaged_weights_are_named(tmp_path):
    cfg = _config()
    save_model(build_model(cfg.model), cfg, "h", {}, tmp_path)
    weights = tmp_path / WEIGHTS_FILE
    whole = weights.read_bytes()
    weights.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(WeightsUnreadable, match=rf"{weights}.*truncated or not a safetensors file"):
        load_model(tmp_path)
    weights.write_bytes(b"\x00" * 100)
    with pytest.raises(WeightsUnreadable, match=str(weights)):
        load_model(tmp_path)
    weights.unlink()
    with pytest.raises(WeightsUnreadable, match=rf"{weights} is missing"):
        load_model(tmp_path)
    # Another config's weights under this config: refused, naming both files.
    other = ExperimentConfig(**{**BASE, "model": {**BASE["model"], "kernel_size": 5}})
    save_model(build_model(other.model), other, "h", {}, tmp_path / "other")
    (tmp_path / WEIGHTS_FILE).write_bytes((tmp_path / "other" / WEIGHTS_FILE).read_bytes())
    with pytest.raises(WeightsUnreadable, match="written by another config"):
        load_model(tmp_path)
    (tmp_path / CONFIG_FILE).write_text("{not json")
    with pytest.raises(WeightsUnreadable, match=rf"{tmp_path / CONFIG_FILE} is not a readable experiment config"):
        load_model(tmp_path)


def overwrite_tensor_data(path, size: int = 4096) -> None:
    """Overwrite `size` bytes in the middle of a safetensors file's tensor data, keeping its header and size
    (the file still reads as a model of its config: only a checksum tells)."""
    import os

    data = bytearray(path.read_bytes())
    start = 8 + int.from_bytes(data[:8], "little")  # past the header's length and the header
    middle = start + (len(data) - start - size) // 2
    assert middle >= start and len(data) - start > size, "the tensor data is smaller than the overwrite"
    data[middle:middle + size] = os.urandom(size)
    path.write_bytes(bytes(data))


def test_weights_changed_since_saved_are_refused_by_name_and_older_folders_load(tmp_path):
    from dape_core.stored import CHECKSUMS_FILE, WeightsChanged, sha256_of

    cfg = _config()
    save_model(build_model(cfg.model), cfg, "h", {}, tmp_path)
    weights = tmp_path / WEIGHTS_FILE
    recorded = json.loads((tmp_path / CHECKSUMS_FILE).read_text())
    assert recorded == {name: sha256_of(tmp_path / name) for name in (WEIGHTS_FILE, CONFIG_FILE, "data.json")}
    size = weights.stat().st_size
    overwrite_tensor_data(weights)
    assert weights.stat().st_size == size
    with pytest.raises(WeightsChanged, match=rf"{weights} changed since it was saved \(SHA-256 "):
        load_model(tmp_path)
    with pytest.raises(WeightsChanged, match="changed since it was saved"):  # the checksums given win
        load_model(tmp_path, checksums=recorded)
    # A folder saved before checksums were kept (no checksums.json, none given): it loads, unchecked.
    (tmp_path / CHECKSUMS_FILE).unlink()
    assert load_model(tmp_path).config == cfg


def _run_study(tmp_path, name: str, keep: str) -> tuple[str, list]:
    from orchestrator.run import run_and_report
    from orchestrator.run_context import RunContext

    spec = {"name": name, "base": BASE, "keep_weights": keep,
            "variants": [{"label": "DAPE1x3", "baseline": True}], "resources": {"cpus": 1, "max_retries": 0}}
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    outcome = run_and_report(RunContext.create(parse_study(spec), uri, storage_dir=tmp_path / "state",
                                               local=True), tmp_path / "reports")
    assert outcome.ok, outcome.failed
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(name)
    return uri, client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'trial'")


@pytest.mark.slow
def test_a_finished_trial_keeps_its_model_in_its_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    uri, (run,) = _run_study(tmp_path, "kept", "final")
    client = MlflowClient(uri)
    assert run.data.tags[WEIGHTS_TAG] == "model/model.safetensors"
    names = sorted(item.path for item in client.list_artifacts(run.info.run_id, "model"))
    assert names == ["model/checksums.json", "model/config.json", "model/data.json", "model/model.safetensors"]
    # The worker's copy and the resume checkpoints are gone from the trial's folder; the log says so.
    folder = tmp_path / "state" / "checkpoints" / run.data.tags["orchestrator.trial_id"]
    assert not folder.exists() or not any(folder.rglob("*.*"))
    log = (tmp_path / client.download_artifacts(run.info.run_id, "trial.log", str(tmp_path))).read_text()
    assert "resume checkpoints" in log and "model kept: model.safetensors" in log
    stored = load_run(run.info.run_id, uri)
    cfg = stored.config
    assert stored.data_hash == run.data.tags["data_hash"]
    assert cfg.fingerprint() == ExperimentConfig(**{**BASE, "train": {**BASE["train"], "seed": 0}}).fingerprint()
    parameters = sum(p.numel() for p in stored.model.parameters())
    assert parameters == run.data.metrics["num_parameters"]
    # The file is the float32 weights and a small header: what `plan` shows.
    assert run.data.metrics["weights_mb"] * 2**20 == pytest.approx(weights_bytes(parameters), rel=0.01)
    assert run.data.metrics["weights_seconds"] >= 0
    assert run.data.metrics["concurrent_trials_max"] == 1  # --local: one trial at a time


@pytest.mark.slow
def test_keep_weights_none_keeps_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    uri, (run,) = _run_study(tmp_path, "not_kept", "none")
    assert WEIGHTS_TAG not in run.data.tags and "weights_mb" not in run.data.metrics
    assert not MlflowClient(uri).list_artifacts(run.info.run_id, "model")
    with pytest.raises(LookupError, match="has no kept model"):
        load_run(run.info.run_id, uri)


def test_plan_shows_the_size_of_the_kept_model(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    size = weights_bytes(ExperimentConfig(**BASE).model.num_parameters()) / 2**20
    for keep, expected in (("final", f"{size:.1f} MiB"), ("none", "none")):
        path = tmp_path / f"{keep}.yaml"
        path.write_text(yaml.safe_dump({"name": f"plan_{keep}", "base": BASE, "keep_weights": keep}))
        result = CliRunner().invoke(app, ["plan", str(path), "--explain"])
        assert result.exit_code == 0, result.output
        # One trial, one size: the legend (--explain) gives it (the column appears where trials' sizes differ).
        legend = next(line for line in result.output.replace("\n", " ").split("weights: ")[1:])
        assert f"(every trial here: {expected})" in legend, result.output
    two = {**BASE, "model": {**BASE["model"], "preset": "tiny"}}
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump({"name": "plan_two", "base": two, "axes": {"model.preset": ["tiny", "small"]}}))
    result = CliRunner().invoke(app, ["plan", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    header = next(line for line in result.output.splitlines() if " trial " in line)
    column = [cell.strip() for cell in header.strip("┃").split("┃")].index("weights")
    rows = [line for line in result.output.splitlines() if line.startswith(("│ 1", "│ 2"))]
    sizes = [[cell.strip() for cell in row.strip("│").split("│")][column] for row in rows]
    assert len(set(sizes)) == 2 and all(size.endswith("MiB") for size in sizes), rows

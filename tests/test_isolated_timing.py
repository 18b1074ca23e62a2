"""Time cost in isolation: `orchestrator evaluate --time` times every stored model alone, one at a time (a
training step on a copy, and the evaluation batch's forward at each length: median and quartiles over repeats
after warm-ups); the report's time table then shows those timings, and otherwise how many trials shared the
device while the in-training timings were taken (recorded per trial by `orchestrator run`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from orchestrator import parse_study
from orchestrator.cli import app
from orchestrator.reporting.timing_source import prefer_isolated, timing_note

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SPEC = {"name": "timed", "base": {
    "model": {"preset": "tiny", "pos_encoding": "kerple", "d_dape": 8, "processor": "dapev2"},
    "data": {"max_files": 80}, "train": {"steps": 12, "batch_size": 4, "seq_len": 32, "log_every": 3},
    "eval": {"lengths": [32, 64], "tail_tokens": 16, "n_windows": 4}},
    "variants": [{"label": "DAPE", "baseline": True, "set": {"model.kernel_size": 1}},
                 {"label": "DAPE1x3", "set": {"model.kernel_size": 3}}],
    "resources": {"cpus": 1, "max_retries": 0}}


def test_frame_takes_isolated_timings_where_they_exist_and_says_so():
    frame = pd.DataFrame({"label": ["A", "B"], "status": ["FINISHED"] * 2, "ms_per_step": [10.0, 20.0],
                          "isolated_ms_per_step": [4.0, None], "isolated_ms_per_step_q1": [3.5, None],
                          "isolated_repeats": [20, None], "concurrent_trials_max": [2, 2]})
    chosen = prefer_isolated(frame)
    assert list(chosen["ms_per_step"]) == [4.0, 20.0] and list(frame["ms_per_step"]) == [10.0, 20.0]
    note = timing_note(chosen)
    assert "ms cells of A are isolated timings" in note and "median of 20 repeats" in note
    assert "ms cells of B were timed during training, with up to 2 trials at once on the device" in note


@pytest.mark.slow
def test_every_stored_model_is_timed_alone_and_the_report_uses_it(tmp_path, monkeypatch, local_ray):
    from orchestrator.run import run_and_report
    from orchestrator.run_context import RunContext

    monkeypatch.chdir(tmp_path)
    path = tmp_path / "timed.yaml"
    path.write_text(yaml.safe_dump(SPEC, sort_keys=False))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # on the local Ray: the two trials train at once
    outcome = run_and_report(RunContext.create(parse_study(SPEC), uri, storage_dir=tmp_path / "state",
                                               study_path=path), tmp_path / "reports")
    assert outcome.ok, outcome.failed
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("timed")

    def runs():
        return client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'trial'")

    trained = runs()
    assert all(run.data.metrics["concurrent_trials_max"] >= 1 for run in trained)
    sharing = int(max(run.data.metrics["concurrent_trials_max"] for run in trained))
    report = (tmp_path / "reports" / "timed" / "report.md").read_text()
    assert "were timed during training" in report
    digests = {run.info.run_id: hashlib.sha256((Path(run.info.artifact_uri.removeprefix("file://")) / "model" /
                                              "model.safetensors").read_bytes()).hexdigest() for run in trained}

    result = CliRunner().invoke(app, ["evaluate", str(path), "--time", "--repeats", "5", "--tracking-uri", uri,
                                      "--reports-dir", str(tmp_path / "reports")])
    assert result.exit_code == 0, result.output
    assert "one at a time (timing)" in result.output
    spans = []
    for run in runs():
        metrics = run.data.metrics
        for name in ("isolated_ms_per_step", "isolated_ms_forward_32", "isolated_ms_forward_64"):
            assert 0 < metrics[f"{name}_q1"] <= metrics[name] <= metrics[f"{name}_q3"], name
        assert metrics["isolated_repeats"] == 5
        tag = next(v for k, v in run.data.tags.items() if k.startswith("orchestrator.evaluation."))
        timing = json.loads(tag)["timing"]
        assert timing["alone"] and timing["repeats"] == 5
        spans.append((timing["began"], timing["ended"]))
        # The training step was timed on a copy: the kept model is unchanged, its trained metrics too.
        weights = Path(run.info.artifact_uri.removeprefix("file://")) / "model" / "model.safetensors"
        assert hashlib.sha256(weights.read_bytes()).hexdigest() == digests[run.info.run_id]
        assert len(client.get_metric_history(run.info.run_id, "ms_per_step")) == 1
    (first, second) = sorted(spans)
    assert first[1] <= second[0], "the two models were timed at the same time"
    report = (tmp_path / "reports" / "timed" / "report.md").read_text()
    assert "ms cells of DAPE, DAPE1x3 are isolated timings" in report
    table = pd.read_csv(tmp_path / "reports" / "timed" / "table_time.csv")
    isolated = {run.data.tags["label"]: run.data.metrics["isolated_ms_per_step"] for run in runs()}
    steps = table[table["column"] == "ms_per_step"]
    assert len(steps) == 2
    for _, row in steps.iterrows():
        assert row["mean"] == pytest.approx(isolated[row["variant"]], rel=1e-9)
    assert sharing in (1, 2)

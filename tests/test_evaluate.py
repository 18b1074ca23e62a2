"""`orchestrator evaluate`: finished trials scored again from their kept models, for real (tiny studies trained
in-process into SQLite stores, evaluated on Ray or in-process). A length evaluated later gives exactly what the
trial would have logged with that length in the study; nothing is trained; done pairs are skipped; each bad
input says what it is and leaves the runs as they were."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch
import yaml
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from orchestrator import parse_study
from orchestrator.cli import app
from orchestrator.errors import StudyInterrupted
from orchestrator.tracking.store import WEIGHTS_TAG

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BASE = {"model": {"preset": "tiny", "pos_encoding": "kerple", "d_dape": 8, "processor": "dapev2"},
        "data": {"max_files": 80}, "train": {"steps": 6, "batch_size": 4, "seq_len": 32, "log_every": 3},
        "eval": {"lengths": [32, 64], "tail_tokens": 16, "n_windows": 4}}
VARIANTS = [{"label": "DAPE", "baseline": True, "set": {"model.kernel_size": 1}},
            {"label": "DAPE1x3", "set": {"model.kernel_size": 3}}]


def _train(root: Path, name: str, lengths: list[int], variants=VARIANTS) -> tuple[Path, str]:
    from orchestrator.run import run_and_report
    from orchestrator.run_context import RunContext

    spec = {"name": name, "base": {**BASE, "eval": {**BASE["eval"], "lengths": lengths}}, "variants": variants,
            "resources": {"cpus": 1, "max_retries": 0}}
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    uri = f"sqlite:///{root / 'mlflow.db'}"
    context = RunContext.create(parse_study(spec), uri, storage_dir=root / "state", local=True)
    outcome = run_and_report(context, root / "reports")
    assert outcome.ok, outcome.failed
    return path, uri


def _runs(uri: str, name: str) -> dict:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(name)
    runs = client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'trial'")
    return {run.data.tags["label"]: run for run in runs}


def _evaluate(path: Path, uri: str, *args: str):
    return CliRunner().invoke(app, ["evaluate", str(path), "--tracking-uri", uri, "--reports-dir",
                                    str(path.parent / "reports"), *args])


def _weights_file(run) -> Path:
    return Path(run.info.artifact_uri.removeprefix("file://")) / "model" / "model.safetensors"


@pytest.mark.slow
def test_a_length_evaluated_later_is_exactly_what_the_trial_would_have_logged(tmp_path, monkeypatch, local_ray):
    monkeypatch.chdir(tmp_path)
    short, uri = _train(tmp_path, "short", [32, 64])
    _train(tmp_path, "long", [32, 64, 128], variants=VARIANTS[1:])
    before = _runs(uri, "short")
    result = _evaluate(short, uri, "--lengths", "128")  # on the local Ray, one task per trial
    assert result.exit_code == 0, result.output
    assert "Evaluating 2 stored trial(s) on Ray" in result.output
    after, trained_with_it = _runs(uri, "short"), _runs(uri, "long")["DAPE1x3"]
    for name in ("ppl_128", "delta_p_128"):  # bit-identical on CPU
        assert after["DAPE1x3"].data.metrics[name] == trained_with_it.data.metrics[name], name
    client = MlflowClient(uri)
    for label, run in after.items():
        # The trial's own metrics are untouched: one point each, the value it trained to.
        assert [m.value for m in client.get_metric_history(run.info.run_id, "ppl_64")] == \
            [before[label].data.metrics["ppl_64"]]
        steps = {m.step for m in client.get_metric_history(run.info.run_id, "ppl_by_length")}
        assert steps == {32, 64, 128}
        evaluations = [key for key in run.data.tags if key.startswith("orchestrator.evaluation.")]
        assert len(evaluations) == 1 and '"lengths": [128]' in run.data.tags[evaluations[0]]
    report = (tmp_path / "reports" / "short" / "report.md").read_text()
    assert "L=128" in report
    # Evaluated pairs are skipped: a second evaluation adds nothing.
    again = _evaluate(short, uri, "--lengths", "128", "--local")
    assert again.exit_code == 0, again.output
    assert "2 trial(s) already evaluated with this protocol: skipped" in again.output
    run_id = after["DAPE"].info.run_id
    assert len(client.get_metric_history(run_id, "ppl_128")) == 1
    # --again redoes it: in this process, the same value as on the Ray worker, as a second point.
    again = _evaluate(short, uri, "--lengths", "128", "--local", "--again")
    assert again.exit_code == 0, again.output
    values = [m.value for m in client.get_metric_history(run_id, "ppl_128")]
    assert len(values) == 2 and values[0] == values[1]


@pytest.mark.slow
def test_evaluate_trains_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path, uri = _train(tmp_path, "frozen", [32])
    runs = _runs(uri, "frozen")
    digests = {label: hashlib.sha256(_weights_file(run).read_bytes()).hexdigest() for label, run in runs.items()}

    def no_step(*args, **kwargs):
        raise AssertionError("an optimizer step was taken during evaluate")

    monkeypatch.setattr(torch.optim.AdamW, "step", no_step)
    result = _evaluate(path, uri, "--lengths", "64", "--tail-tokens", "8", "--local", "--visualise")
    assert result.exit_code == 0, result.output
    for label, run in _runs(uri, "frozen").items():
        assert hashlib.sha256(_weights_file(run).read_bytes()).hexdigest() == digests[label]
        # Another protocol (tail 8): its metrics carry it in their names, apart from the trial's own.
        assert "ppl_64.k8.n4" in run.data.metrics and "ppl_64" not in run.data.metrics
        artifacts = [item.path for item in MlflowClient(uri).list_artifacts(run.info.run_id, "attention")]
        assert artifacts, "the heat maps of --visualise are logged"
    report = (tmp_path / "reports" / "frozen" / "report.md").read_text()
    assert report.count("Learned position pattern:") == 2  # the report shows each trial's last layer
    assert len(list((tmp_path / "reports" / "frozen" / "plots").glob("attention_*.png"))) == 2


@pytest.mark.slow
def test_bad_inputs_are_named_and_the_other_trials_go_on(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path, uri = _train(tmp_path, "faults", [32])
    runs = _runs(uri, "faults")
    client = MlflowClient(uri)
    # Lengths beyond memory: refused up front with the estimate, nothing logged.
    result = _evaluate(path, uri, "--lengths", "3000000", "--local")
    assert result.exit_code == 2, result.output
    assert "would not fit this machine's memory" in result.output and "GiB" in result.output
    assert "Nothing was evaluated" in result.output
    assert not any("ppl_3000000" in run.data.metrics for run in _runs(uri, "faults").values())
    # A trial without weights (trained before they were kept): named, with how to get them; the other goes on.
    client.delete_tag(runs["DAPE"].info.run_id, WEIGHTS_TAG)
    result = _evaluate(path, uri, "--lengths", "64", "--local")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert f"DAPE · s0 (run {runs['DAPE'].info.run_id}) has no kept model" in text
    assert "keep_weights: final" in text and "1 without weights" in text
    assert "ppl_64" in _runs(uri, "faults")["DAPE1x3"].data.metrics
    # Truncated weights: an error naming the run and the file; the file and the run's metrics as they were.
    weights = _weights_file(runs["DAPE1x3"])
    weights.write_bytes(weights.read_bytes()[:1000])
    metrics = dict(_runs(uri, "faults")["DAPE1x3"].data.metrics)
    result = _evaluate(path, uri, "--lengths", "128", "--local")
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "DAPE1x3 · s0" in text and str(weights) in text and "truncated or not a safetensors file" in text
    assert len(weights.read_bytes()) == 1000
    assert _runs(uri, "faults")["DAPE1x3"].data.metrics == metrics


@pytest.mark.slow
def test_an_interrupted_evaluation_resumes_with_what_is_missing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path, uri = _train(tmp_path, "resumed", [32])
    from orchestrator.evaluation import runner, worker
    from orchestrator.evaluation.request import EvalRequest
    from orchestrator.run_context import RunContext

    real, calls = worker.evaluate_task, []

    def interrupted_second(task: dict) -> dict:  # Ctrl-C while the second trial is evaluated
        calls.append(task["run_name"])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(task)

    monkeypatch.setattr(worker, "evaluate_task", interrupted_second)
    study = parse_study(yaml.safe_load(path.read_text()))
    with pytest.raises(StudyInterrupted, match="1 trial\\(s\\) were evaluated"):
        runner.evaluate_study(RunContext.open(study, uri, local=True), EvalRequest(lengths=(64,)),
                              reports_dir=tmp_path / "reports")
    done = [label for label, run in _runs(uri, "resumed").items() if "ppl_64" in run.data.metrics]
    assert len(done) == 1
    monkeypatch.setattr(worker, "evaluate_task", real)
    outcome = runner.evaluate_study(RunContext.open(study, uri, local=True), EvalRequest(lengths=(64,)),
                                    reports_dir=tmp_path / "reports")
    assert len(outcome.evaluated) == 1 and len(outcome.skipped) == 1
    assert all("ppl_64" in run.data.metrics for run in _runs(uri, "resumed").values())


@pytest.mark.slow
def test_a_trial_still_running_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path, uri = _train(tmp_path, "busy", [32])
    running = _runs(uri, "busy")["DAPE"]
    MlflowClient(uri).update_run(running.info.run_id, status="RUNNING")  # as while another orchestrator trains it
    result = _evaluate(path, uri, "--lengths", "64", "--local")
    assert result.exit_code == 0, result.output
    assert "1 not finished" in result.output
    assert "ppl_64" not in _runs(uri, "busy")["DAPE"].data.metrics


def _read_only(folder: Path, argv: list[str]) -> tuple[int, str]:
    """`argv` run with `folder` read-only, as an archive on a read-only mount: by mode for a user, by a
    read-only bind mount in a private mount namespace for root (whom modes do not stop)."""
    import os
    import subprocess
    import sys

    if os.geteuid() != 0:
        for path in [folder, *folder.rglob("*")]:
            path.chmod(path.stat().st_mode & ~0o222)
        try:
            done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=300)
        finally:
            for path in [folder, *folder.rglob("*")]:
                path.chmod(path.stat().st_mode | 0o200)
    else:
        script = 'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" "$1" && shift && exec "$@"'
        done = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", str(folder), sys.executable, *argv],
                              capture_output=True, text=True, timeout=300)
        if "mount" in done.stderr and done.returncode != 0 and "orchestrator" not in done.stderr:
            pytest.skip(f"no private read-only mount here: {done.stderr.strip()}")
    return done.returncode, done.stdout + done.stderr


@pytest.mark.slow
def test_evaluate_on_a_read_only_store_says_what_run_says(tmp_path, monkeypatch):
    """Refused before anything is done (exit 2, `run`'s words), not after MLflow's logged traceback (exit 3)."""
    monkeypatch.chdir(tmp_path)
    archive = tmp_path / "archive"
    archive.mkdir()
    path, uri = _train(archive, "archived", [32])
    before = (archive / "mlflow.db").read_bytes()
    reports = tmp_path / "reports"
    for args, nothing in ((["evaluate", "--lengths", "64", "--local"], "Nothing was evaluated"),
                          (["evaluate", "--local"], "Nothing was evaluated"), (["run", "--local"], "Nothing was run")):
        code, output = _read_only(archive, ["-m", "orchestrator", args[0], str(path), "--tracking-uri", uri,
                                            "--reports-dir", str(reports), *args[1:]])
        text = " ".join(output.split())
        assert code == 2, (args, output)
        assert f"The tracking store's folder {archive} is not writable" in text, (args, text)
        assert nothing in text and "Traceback" not in output and "MlflowException" not in output
        assert len(output.strip().splitlines()) <= 6, output
    assert (archive / "mlflow.db").read_bytes() == before


@pytest.mark.slow
def test_weights_changed_since_saved_are_refused_by_name_and_the_others_scored(tmp_path, monkeypatch):
    """4 KiB overwritten inside one model's tensor data (header and size intact: it still loads as a model):
    evaluate names the trial and the file and scores the other; --verify flags it; load_run refuses it. A run
    recorded before checksums were kept still loads, and evaluate says it was not checked."""
    from test_weights import overwrite_tensor_data

    from dape_core.stored import CHECKSUMS_FILE, WeightsChanged, sha256_of
    from orchestrator.evaluation.stored import load_run

    monkeypatch.chdir(tmp_path)
    path, uri = _train(tmp_path, "tampered", [32])
    runs = _runs(uri, "tampered")
    for run in runs.values():  # recorded at save, one tag per file of the kept model
        folder = _weights_file(run).parent
        for name in ("model.safetensors", "config.json", "data.json"):
            assert run.data.tags[f"orchestrator.sha256.model/{name}"] == sha256_of(folder / name)
    verified = _evaluate(path, uri, "--verify")
    assert verified.exit_code == 0, verified.output
    assert "2 trial(s) with every kept file as saved, 0 changed" in verified.output
    damaged = _weights_file(runs["DAPE1x3"])
    overwrite_tensor_data(damaged)
    result = _evaluate(path, uri, "--lengths", "64", "--local")
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert f"DAPE1x3 · s0: FAILED: WeightsChanged: {damaged} changed since it was saved" in text, text
    after = _runs(uri, "tampered")
    assert "ppl_64" in after["DAPE"].data.metrics and "ppl_64" not in after["DAPE1x3"].data.metrics
    verified = _evaluate(path, uri, "--verify")
    assert verified.exit_code == 1, verified.output
    text = " ".join(verified.output.split())
    assert f"DAPE1x3 · s0 (run {runs['DAPE1x3'].info.run_id}): CHANGED: {damaged} changed since it was saved" in text
    assert "1 trial(s) with every kept file as saved, 1 changed" in text
    with pytest.raises(WeightsChanged, match=rf"run {runs['DAPE1x3'].info.run_id} \(DAPE1x3 · s0\): {damaged} "
                                             "changed since it was saved"):
        load_run(runs["DAPE1x3"].info.run_id, uri)
    # A record from before checksums were kept: no tags, no checksums.json. Loaded, and said to be unchecked.
    client, kept = MlflowClient(uri), runs["DAPE"]
    for key in [key for key in kept.data.tags if key.startswith("orchestrator.sha256.")]:
        client.delete_tag(kept.info.run_id, key)
    (_weights_file(kept).parent / CHECKSUMS_FILE).unlink()
    result = _evaluate(path, uri, "--lengths", "128", "--local")
    text = " ".join(result.output.split())
    assert "note: DAPE · s0: no checksum recorded on its run (saved before checksums were kept): its weights are " \
           "loaded unchecked" in text, text
    assert "ppl_128" in _runs(uri, "tampered")["DAPE"].data.metrics
    with pytest.warns(UserWarning, match="loaded unchecked"):
        assert load_run(kept.info.run_id, uri).config.model.kernel_size == 1
    verified = _evaluate(path, uri, "--verify")
    assert "DAPE · s0 (run" in verified.output and "not checked: no checksum recorded" in verified.output

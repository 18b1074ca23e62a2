"""The tracking store's two doors (create for the writer, open read-only) and the one stream of trial events
with its listeners, on a real SQLite MLflow store (no Ray: the events are fed as a runner feeds them)."""

import subprocess
import sys
import tempfile

import pytest
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from orchestrator import expand, parse_study
from orchestrator.cli import app
from orchestrator.tracking import TRIAL_ID_TAG, StudyNotFound, StudyStore, TrialEvents, TrialListener
from orchestrator.tracking.recorder import MLflowRecorder
from orchestrator.trial.protocol import FINAL_FLAG

STUDY = {"name": "events", "base": {"model": {"preset": "tiny"}, "train": {"steps": 4}},
         "variants": [{"label": "A", "baseline": True, "set": {"model.processor": "none"}},
                      {"label": "B", "set": {"model.processor": "dapev2"}}]}


def test_open_on_a_missing_store_is_a_clear_error_and_creates_nothing(tmp_path):
    uri = f"sqlite:///{tmp_path / 'none' / 'mlflow.db'}"
    with pytest.raises(StudyNotFound, match=r"no tracking store at .*mlflow\.db: run the study there first") as caught:
        StudyStore.open(uri, "events")
    # A Python error names the Python argument; the command line names its flag.
    assert "tracking_uri=" in str(caught.value) and "--tracking-uri" not in str(caught.value)
    assert "--tracking-uri URI" in caught.value.describe("--tracking-uri ")
    assert not (tmp_path / "none").exists()


def test_open_finds_the_experiment_and_parent_that_create_made(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    written = StudyStore.create(uri, "events")
    parent = written.start_parent({"code_version": "test"})
    read = StudyStore.open(uri, "events")
    assert (read.experiment_id, read.parent_run_id) == (written.experiment_id, parent)
    with pytest.raises(StudyNotFound, match="has no experiment 'other'"):
        StudyStore.open(uri, "other")
    assert StudyStore.create(uri, "events").parent_run_id == parent  # a rerun nests under the same parent


def test_status_and_plan_on_a_missing_store_create_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    import yaml

    (tmp_path / "events.yaml").write_text(yaml.safe_dump(STUDY))
    for command in ("status", "plan"):
        result = CliRunner().invoke(app, [command, "events.yaml"])
        assert result.exit_code == 0, result.output
        assert "to run" in result.output.lower()
    assert not (tmp_path / "mlruns").exists()


class Recording(TrialListener):
    def __init__(self):
        self.seen = []

    def trial_started(self, event):
        self.seen.append(("started", event.trial.label))

    def trial_result(self, event):
        self.seen.append(("result", event.trial.label, event.final))

    def trial_finished(self, event):
        self.seen.append(("finished", event.trial.label, event.stopped_early))

    def trial_failed(self, event):
        self.seen.append(("failed", event.trial.label, event.reason))

    def trial_retried(self, event):
        self.seen.append(("retried", event.trial.label, event.attempt))


def test_events_say_what_an_end_means_and_the_recorder_writes_them(tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"  # the temporary folder the recorder writes its files through
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    a, b = expand(parse_study(STUDY))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    store = StudyStore.create(uri, "events")
    store.start_parent({})
    recording = Recording()
    events = TrialEvents([MLflowRecorder(store, {"study": "events"}), recording])

    events.started(a)
    events.result(a, {"step": 1, "total_steps": 4, "train_loss": 2.5, "lr": 1e-3, "pid": 123})
    events.crashed(a, "RayActorError: died")
    events.started(a)  # the retry keeps its run
    kernels = "training (bfloat16, 1x3) on cuda:0: fused, tiles 16x16 forward, 16x32 backward"
    events.result(a, {FINAL_FLAG: 1, "step": 4, "ppl_64": 9.0, "ppl_128": 9.5, "train_seconds": 2.0,
                      "eval_seconds": 1.0, "device": "cpu", "attention_kernels": kernels})
    events.ended(a)
    events.started(b)
    events.result(b, {FINAL_FLAG: 1, "step": 4, "error": "NonFiniteLossError: loss is nan"})
    events.ended(b)  # the trial returned, but its final result carried an error: a failure

    assert recording.seen == [("started", "A"), ("result", "A", False), ("retried", "A", 1), ("started", "A"),
                              ("result", "A", True), ("finished", "A", False), ("started", "B"),
                              ("result", "B", True), ("failed", "B", "NonFiniteLossError: loss is nan")]
    tally = events.tally
    assert tally.finished == {a.trial_id} and tally.failed == {b.trial_id: "NonFiniteLossError: loss is nan"}
    assert tally.work_seconds == {a.trial_id: 3.0} and tally.steps_run == {a.trial_id: 4, b.trial_id: 4}

    client = MlflowClient(uri)
    runs = {run.data.tags[TRIAL_ID_TAG]: run for run in StudyStore.open(uri, "events").trial_runs()}
    assert len(runs) == 2
    run_a, run_b = runs[a.trial_id], runs[b.trial_id]
    assert run_a.info.status == "FINISHED" and run_a.data.metrics["ppl_128"] == 9.5
    assert run_a.data.tags["retries"] == "1" and run_a.data.tags["worker_pid"] == "123"
    assert run_a.data.params["train.steps"] == "4" and run_a.data.tags["device"] == "cpu"
    assert run_a.data.tags["attention_kernels"] == kernels and "attention_kernels" not in run_a.data.metrics
    history = client.get_metric_history(run_a.info.run_id, "ppl_by_length")
    assert {m.step: m.value for m in history} == {64: 9.0, 128: 9.5}
    assert run_b.info.status == "FAILED" and run_b.data.tags["error"].startswith("NonFiniteLossError")
    assert "trial_config.yaml" in {artifact.path for artifact in client.list_artifacts(run_a.info.run_id)}
    assert list(scratch.iterdir()) == []  # nothing left behind in the temporary folder


def test_an_end_without_a_final_result_is_an_early_stop(tmp_path):
    (a, _) = expand(parse_study(STUDY))
    recording = Recording()
    events = TrialEvents([recording])
    events.started(a)
    events.result(a, {"step": 2, "total_steps": 4, "val_loss": 3.0})
    events.ended(a)
    assert recording.seen[-1] == ("finished", "A", True) and a.trial_id in events.tally.finished


def test_the_worker_side_imports_neither_mlflow_nor_the_driver():
    code = ("import sys, orchestrator.execution.trainable, orchestrator.execution.tune_trial; "
            "print(sorted(m for m in ('mlflow', 'orchestrator.tracking', 'ray') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_create_on_a_ready_store_and_an_idle_start_of_a_finished_parent_write_nothing(tmp_path):
    # A finished study run again with nothing to run (execution/runner.py): `create` finds the experiment it
    # made without MLflow's client, and a FINISHED parent run that has the tags already is left as it is.
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = StudyStore.create(uri, "events")
    parent = first.start_parent({"code_version": "v1"})
    first.end_parent("FINISHED")
    client = MlflowClient(uri)
    ended = client.get_run(parent).info.end_time
    data = (tmp_path / "mlflow.db").read_bytes()

    again = StudyStore.create(uri, "events")
    assert again._client is None and (again.experiment_id, again.parent_run_id) == (first.experiment_id, parent)
    assert again.start_parent({"code_version": "v1"}, idle=True) == parent and again.parent_kept
    again.set_tags(parent, {"code_version": "v1"})  # what it has already
    again.end_parent("FINISHED")
    assert again._client is None and (tmp_path / "mlflow.db").read_bytes() == data  # nothing written

    other_code = StudyStore.create(uri, "events")  # other tags: written, the run reopened and closed as always
    other_code.start_parent({"code_version": "v2"}, idle=True)
    assert not other_code.parent_kept and client.get_run(parent).info.status == "RUNNING"
    other_code.end_parent("KILLED")
    killed = StudyStore.create(uri, "events")  # a parent not FINISHED (here KILLED) is closed again
    killed.start_parent({"code_version": "v2"}, idle=True)
    killed.end_parent("FINISHED")
    run = client.get_run(parent)
    assert (run.info.status, run.data.tags["code_version"]) == ("FINISHED", "v2") and run.info.end_time >= ended
    busy = StudyStore.create(uri, "events")  # something to run: the parent is reopened even with the same tags
    busy.start_parent({"code_version": "v2"}, idle=False)
    assert not busy.parent_kept and client.get_run(parent).info.status == "RUNNING"

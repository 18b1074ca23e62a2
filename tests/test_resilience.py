"""Runs that survive: a killed orchestrator resumes, a killed trial process is retried, a NaN loss fails
its trial with the reason while the study goes on, --failed-only and --local; Ctrl-C stops a study cleanly
(exit 130) and the rerun resumes it; two orchestrators of one study at once run each trial once."""

import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from mlflow.tracking import MlflowClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # each test waits up to 300 s for a study

BASE = {
    "model": {"preset": "tiny", "pos_encoding": "alibi", "processor": "none"},
    "data": {"max_files": 300},
    "train": {"steps": 60, "batch_size": 8, "seq_len": 32, "log_every": 10},
    "eval": {"lengths": [32, 64], "tail_tokens": 16, "n_windows": 4},
}


def _write(tmp_path, name, **extra):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "base": BASE, **extra}))  # extra may replace the base
    return path


def _start(path, cwd, *args, create_schema=True):
    # The test reads the store while the orchestrator writes it: create the schema first, so that the test's
    # reads never race the orchestrator on creating it.
    if create_schema:
        MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}").search_experiments()
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{cwd / 'mlflow.db'}"}
    # A new session: the orchestrator and the Ray processes it starts share one process group to stop.
    return subprocess.Popen([sys.executable, "-m", "orchestrator", "run", str(path), *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _runs(cwd, name):
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        return client, []
    return client, client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'trial'")


def _wait_for(predicate, timeout, proc):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            raise AssertionError(f"orchestrator exited early ({proc.returncode}):\n{proc.stdout.read()}")
        time.sleep(0.5)
    raise AssertionError("timed out")


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


def test_sigkilled_orchestrator_resumes_without_retraining(tmp_path):
    # 300 steps: the trials after the first must still be running when the kill lands (a reused process trains a
    # tiny trial's 60 steps in a fraction of a second).
    path = _write(tmp_path, "killed", base={**BASE, "train": {**BASE["train"], "steps": 300, "log_every": 50}},
                  axes={"model.n_layer": [1, 2, 3]}, resources={"cpus": 1, "max_concurrent": 1})
    proc = _start(path, tmp_path)
    try:
        _wait_for(lambda: any(r.info.status == "FINISHED" for r in _runs(tmp_path, "killed")[1]), 240, proc)
    finally:
        _kill_group(proc)
    client, before = _runs(tmp_path, "killed")
    finished = {r.info.run_id: client.get_metric_history(r.info.run_id, "train_loss")
                for r in before if r.info.status == "FINISHED"}
    assert 1 <= len(finished) < 3

    proc = _start(path, tmp_path)
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, output
    assert f"{len(finished)} trial(s) already finished" in output
    assert "overhead -" not in output  # a resumed trial's earlier training is no negative share
    client, after = _runs(tmp_path, "killed")
    by_trial = {}
    for run in after:
        by_trial.setdefault(run.data.tags["orchestrator.trial_id"], []).append(run)
    assert len(by_trial) == 3
    for runs in by_trial.values():
        assert [r.info.status for r in runs].count("FINISHED") == 1  # nothing trained twice to the end
    for run_id, history in finished.items():  # runs finished before the kill are untouched
        assert client.get_run(run_id).info.status == "FINISHED"
        assert [(m.step, m.value) for m in client.get_metric_history(run_id, "train_loss")] == \
               [(m.step, m.value) for m in history]
    stale = [r for r in after if r.info.status == "KILLED"]
    assert all(r.data.tags.get("orchestrator.stale") == "true" for r in stale)


def test_killed_trial_process_is_retried_and_the_study_completes(tmp_path):
    # Long enough to be still training when its process is killed (a tiny trial trains 100 steps in under a second).
    spec = dict(BASE, train={**BASE["train"], "steps": 1500, "log_every": 50})
    path = tmp_path / "retry.yaml"
    path.write_text(yaml.safe_dump({"name": "retry", "base": spec, "resources": {"cpus": 1, "max_retries": 2}}))
    proc = _start(path, tmp_path)
    try:
        def worker_pid():
            runs = _runs(tmp_path, "retry")[1]
            return runs and runs[0].data.tags.get("worker_pid")

        def past_first_checkpoint():  # checkpoints every 150 of the 1500 steps
            runs = _runs(tmp_path, "retry")[1]
            return runs and runs[0].data.metrics.get("train_loss") and worker_pid() and \
                max(m.step for m in MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_metric_history(
                    runs[0].info.run_id, "train_loss")) >= 300
        _wait_for(past_first_checkpoint, 240, proc)
        os.kill(int(worker_pid()), signal.SIGKILL)  # the trial's own process, found through its MLflow tag
        output, _ = proc.communicate(timeout=300)
    finally:
        _kill_group(proc)
    assert proc.returncode == 0, output
    client, runs = _runs(tmp_path, "retry")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert runs[0].data.tags["retries"] == "1"
    # The retry continued from the trial's last checkpoint instead of starting over.
    assert 0 < runs[0].data.metrics["resumed_from_step"] < 1500
    assert "ppl_64" in runs[0].data.metrics


def test_nan_loss_fails_its_trial_and_failed_only_reruns_it(tmp_path):
    path = _write(tmp_path, "nan", variants=[{"label": "ok"}, {"label": "diverges", "set": {"train.lr": 1.0e4}}],
                  resources={"cpus": 1, "max_retries": 3})
    proc = _start(path, tmp_path, "--local")
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 1, output
    client, runs = _runs(tmp_path, "nan")
    by_label = {r.data.tags["label"]: r for r in runs}
    assert by_label["ok"].info.status == "FINISHED"
    assert by_label["diverges"].info.status == "FAILED"
    assert "NonFiniteLossError" in by_label["diverges"].data.tags["error"]
    assert "diverges · s0: FAILED" in output

    proc = _start(path, tmp_path, "--local", "--failed-only")
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 1
    _, runs = _runs(tmp_path, "nan")
    assert [r.data.tags["label"] for r in runs].count("ok") == 1  # the finished trial was not rerun
    assert [r.data.tags["label"] for r in runs].count("diverges") == 2


def _by_identity(runs):
    by_trial = {}
    for run in runs:
        by_trial.setdefault(run.data.tags["orchestrator.trial_id"], []).append(run)
    return by_trial


def _step_reached(cwd, run):
    history = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}").get_metric_history(run.info.run_id, "train_loss")
    return max((m.step for m in history), default=0)


def test_ctrl_c_stops_the_study_with_130_and_the_rerun_resumes_it(tmp_path):
    # Long enough that the stopped trial is still training when Ctrl-C lands: with its process reused, a tiny
    # trial trains 100 steps in well under a second, and one that ends first has no checkpoint left to resume.
    spec = dict(BASE, train={**BASE["train"], "steps": 1000, "log_every": 50})
    path = tmp_path / "ctrl_c.yaml"
    path.write_text(yaml.safe_dump({"name": "ctrl_c", "base": spec, "axes": {"model.n_layer": [1, 2]},
                                    "resources": {"cpus": 1, "max_concurrent": 1}}))
    # The first trial also finds an unreadable checkpoint of its own (random bytes): through Ray Tune too, it is
    # named, set aside, and the trial trains from scratch.
    from orchestrator import expand, load_study

    first = expand(load_study(path))[0]
    planted = tmp_path / ".orchestrator" / "checkpoints" / first.trial_id / "trainer.pt"
    planted.parent.mkdir(parents=True)
    planted.write_bytes(os.urandom(4096))

    proc = _start(path, tmp_path)
    try:
        def one_finished_one_past_a_checkpoint():  # checkpoints every 100 of the 1000 steps
            runs = _runs(tmp_path, "ctrl_c")[1]
            running = [r for r in runs if r.info.status == "RUNNING"]
            return any(r.info.status == "FINISHED" for r in runs) and running and \
                _step_reached(tmp_path, running[0]) >= 300
        _wait_for(one_finished_one_past_a_checkpoint, 300, proc)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in a terminal signals the whole foreground group
        output, _ = proc.communicate(timeout=180)
    finally:
        _kill_group(proc)
    assert proc.returncode == 130, output
    assert "Interrupted by Ctrl-C" in output
    assert "1 running trial(s) were stopped and their runs closed as KILLED" in output
    assert "Tuner.restore" not in output and "Traceback" not in output
    client, runs = _runs(tmp_path, "ctrl_c")
    (finished,) = [r for r in runs if r.info.status == "FINISHED"]
    (stopped,) = [r for r in runs if r.info.status != "FINISHED"]
    assert stopped.info.status == "KILLED" and stopped.data.tags["interrupted"] == "true"  # not FAILED, not RUNNING
    assert "error" not in stopped.data.tags
    experiment = client.get_experiment_by_name("ctrl_c").experiment_id
    (parent,) = client.search_runs([experiment], "tags.`orchestrator.role` = 'study'")
    assert parent.info.status == "KILLED"
    first_run = next(r for r in runs if r.data.tags["orchestrator.trial_id"] == first.trial_id)
    assert str(planted) in first_run.data.tags["checkpoint_set_aside"]
    assert list(planted.parent.glob("trainer.pt.corrupt-*"))

    proc = _start(path, tmp_path)
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, output
    assert "1 trial(s) already finished" in output
    client, runs = _runs(tmp_path, "ctrl_c")
    by_trial = _by_identity(runs)
    assert [r.info.run_id for r in by_trial[finished.data.tags["orchestrator.trial_id"]]] == [finished.info.run_id]
    resumed = [r for r in by_trial[stopped.data.tags["orchestrator.trial_id"]] if r.info.status == "FINISHED"]
    assert len(resumed) == 1 and resumed[0].data.metrics["resumed_from_step"] >= 300  # from its checkpoint


@pytest.mark.parametrize("second_starts", ["at once, on a new store", "while the first trains"])
def test_two_runs_of_one_study_at_once_run_each_trial_once(second_starts, tmp_path):
    at_once = second_starts.startswith("at once")
    # While the first trains, its trials must outlast the second's start-up (seconds of imports on a busy
    # machine), or the second finds them finished and never meets a live lease.
    base = BASE if at_once else {**BASE, "train": {**BASE["train"], "steps": 1000, "log_every": 50}}
    path = _write(tmp_path, "twice", base=base, axes={"model.n_layer": [1, 2]},
                  resources={"cpus": 1, "max_concurrent": 1})
    first = _start(path, tmp_path, create_schema=not at_once)
    try:
        if not at_once:  # the first holds a live trial when the second looks at the store
            _wait_for(lambda: any(r.info.status == "RUNNING" and _step_reached(tmp_path, r) >= 10
                                  for r in _runs(tmp_path, "twice")[1]), 240, first)
        second = _start(path, tmp_path, create_schema=False)
        try:
            outputs = [proc.communicate(timeout=600)[0] for proc in (first, second)]
        finally:
            _kill_group(second)
    finally:
        _kill_group(first)
    assert (first.returncode, second.returncode) == (0, 0), outputs
    _, runs = _runs(tmp_path, "twice")
    by_trial = _by_identity(runs)
    assert len(by_trial) == 2  # no trial lost
    for trial_runs in by_trial.values():  # none trained twice, and no live run closed as stale by the other
        assert [r.info.status for r in trial_runs] == ["FINISHED"], [(r.info.status, r.data.tags) for r in trial_runs]
    if not at_once:
        assert "being run by another orchestrator" in outputs[1], outputs[1]
    for output in outputs:
        assert "Traceback" not in output and "duplicate column" not in output

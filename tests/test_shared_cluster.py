"""Safe on a shared cluster: SIGTERM stops a study as cleanly as Ctrl-C (exit 143, runs KILLED, no native
stack dump from Ray) and the rerun resumes it."""

import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from test_resilience import BASE, _by_identity, _kill_group, _runs, _start, _step_reached, _wait_for


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("to_whom", ["the driver", "its process group"])
def test_sigterm_stops_the_study_with_143_and_the_rerun_resumes_it(to_whom, tmp_path):
    # The driver alone: `kill PID`. The process group, Ray's processes too: what a batch system's cancel or
    # preemption does to every process of a job (Ray's GCS is then gone: the bounded last resort closes the runs).
    # Long enough that the trial is still training when SIGTERM lands, past its first checkpoint.
    spec = dict(BASE, train={**BASE["train"], "steps": 1000, "log_every": 50})
    path = tmp_path / "term.yaml"
    path.write_text(yaml.safe_dump({"name": "term", "base": spec, "resources": {"cpus": 1, "max_concurrent": 1}}))
    proc = _start(path, tmp_path)
    try:
        def past_a_checkpoint():  # checkpoints every 100 of the 1000 steps
            running = [r for r in _runs(tmp_path, "term")[1] if r.info.status == "RUNNING"]
            return running and _step_reached(tmp_path, running[0]) >= 300
        _wait_for(past_a_checkpoint, 300, proc)
        sent = time.monotonic()
        if to_whom == "the driver":
            os.kill(proc.pid, signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGTERM)
        output, _ = proc.communicate(timeout=180)
        seconds = time.monotonic() - sent
    finally:
        _kill_group(proc)
    print(f"SIGTERM to {to_whom}, to exit: {seconds:.1f}s")
    assert proc.returncode == 143, output
    assert "Interrupted by SIGTERM" in output, output
    if to_whom == "the driver":
        assert "1 running trial(s) were stopped and their runs closed as KILLED" in output, output
    assert seconds < 30  # inside SLURM's default KillWait
    for dump in ("SIGTERM received", "PC: @", "Traceback", "Tuner.restore"):
        assert dump not in output, output
    client, runs = _runs(tmp_path, "term")
    (stopped,) = runs
    assert stopped.info.status == "KILLED" and stopped.data.tags["interrupted"] == "true"
    experiment = client.get_experiment_by_name("term").experiment_id
    assert not client.search_runs([experiment], "tags.`orchestrator.role` = 'lease'")  # its lease was given back
    if to_whom != "the driver":
        return  # the rerun resumes alike (below): the runs and the checkpoint are the same (suite time)

    proc = _start(path, tmp_path)
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, output
    (trial_runs,) = _by_identity(_runs(tmp_path, "term")[1]).values()
    resumed = [r for r in trial_runs if r.info.status == "FINISHED"]
    assert len(resumed) == 1 and resumed[0].data.metrics["resumed_from_step"] >= 300  # from its checkpoint


def test_a_first_sigterm_stops_the_tuner_a_second_ends_at_once_and_ray_cannot_keep_it():
    from orchestrator.execution import interrupt

    told = []
    before = signal.getsignal(signal.SIGTERM)  # SIG_DFL, or the session's Ray's where an earlier test started it
    with interrupt.stop_signals():
        signal.signal(signal.SIGTERM, lambda *_: told.append("ray's"))  # what ray.init does to the driver
        interrupt.reclaim()
        with interrupt.graceful_interrupt(told.append):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)  # (Python runs a handler between bytecodes of the main thread)
            assert interrupt.requested() and told == ["SIGTERM"]  # the first: the trials are asked to stop
            with pytest.raises(interrupt.Terminated):  # the second: at once
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
        assert interrupt.exit_code() == 143 and interrupt.cause() == "SIGTERM"
        with pytest.raises(KeyboardInterrupt):  # outside the Tuner, the first signal stops at once
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
    assert signal.getsignal(signal.SIGTERM) == before  # given back as it was
    interrupt.reset()
    assert interrupt.exit_code() == 130


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_stop_before_the_result_is_recorded_costs_no_retraining(tmp_path, monkeypatch, capsys):
    from cli_support import run_cli
    from mlflow.tracking import MlflowClient

    from orchestrator.tracking.store import StudyStore

    path = tmp_path / "window.yaml"
    path.write_text(yaml.safe_dump({"name": "window", "base": BASE, "resources": {"cpus": 1}}))
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    real_end = StudyStore.end_trial_run

    def stopped_in_the_window(self, run_id, status):  # Ctrl-C lands after the trial ended, before FINISHED
        if status == "FINISHED":
            raise KeyboardInterrupt
        real_end(self, run_id, status)

    monkeypatch.setattr(StudyStore, "end_trial_run", stopped_in_the_window)
    code, output = run_cli(capsys, "run", path, "--local", "--tracking-uri", uri)
    assert code == 130, output
    checkpoints = list((tmp_path / ".orchestrator" / "checkpoints").glob("*/trainer.pt"))
    assert len(checkpoints) == 1, output  # still there: the result is not in the store

    monkeypatch.setattr(StudyStore, "end_trial_run", real_end)
    code, output = run_cli(capsys, "run", path, "--local", "--tracking-uri", uri)
    assert code == 0, output
    client = MlflowClient(uri)
    (finished,) = [run for run in client.search_runs([client.get_experiment_by_name("window").experiment_id],
                                                     "tags.`orchestrator.role` = 'trial'")
                   if run.info.status == "FINISHED"]
    assert finished.data.metrics["resumed_from_step"] == BASE["train"]["steps"]  # evaluated again, not retrained
    assert not checkpoints[0].exists()  # recorded now: its checkpoints are gone


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_stored_weights_follow_the_users_umask(umask, mode, tmp_path):
    import stat

    from test_weights import BASE as WEIGHTS_BASE

    from dape_core import ExperimentConfig, build_model
    from dape_core.stored import save_model

    cfg = ExperimentConfig(**WEIGHTS_BASE)
    previous = os.umask(umask)
    try:
        files = save_model(build_model(cfg.model), cfg, "h", {}, tmp_path)
    finally:
        os.umask(previous)
    assert {path.name: stat.S_IMODE(path.stat().st_mode) for path in files} == dict.fromkeys(
        (path.name for path in files), mode)  # the safetensors file too, which its library writes 0600


def _snapshot(folder):
    return {str(path): path.stat().st_mtime_ns for path in folder.rglob("*") if path.is_file()}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_copied_store_evaluates_in_its_own_place_and_one_without_artifacts_says_so(tmp_path, monkeypatch):
    import shutil
    import stat

    from mlflow.tracking import MlflowClient
    from test_evaluate import VARIANTS, _train

    def _evaluate(study, uri, *args):  # its own process, as a colleague's command (MLflow caches a run's place)
        return subprocess.run([sys.executable, "-m", "orchestrator", "evaluate", str(study), "--tracking-uri", uri,
                               "--reports-dir", str(study.parent / "reports"), *args], cwd=study.parent,
                              capture_output=True, text=True, timeout=240)

    original, copy, alone = tmp_path / "original", tmp_path / "copy", tmp_path / "alone"
    original.mkdir()
    monkeypatch.chdir(tmp_path)
    previous = os.umask(0o022)
    try:
        path, uri = _train(original, "moving", [32], variants=VARIANTS[:1])
    finally:
        os.umask(previous)
    (weights,) = (original / "artifacts").rglob("model.safetensors")
    assert stat.S_IMODE(weights.stat().st_mode) == 0o644  # a colleague can read the stored model
    copy.mkdir()
    shutil.copy2(original / "mlflow.db", copy / "mlflow.db")
    shutil.copytree(original / "artifacts", copy / "artifacts")
    shutil.copy2(path, copy / path.name)
    before = _snapshot(original)

    copied_uri = f"sqlite:///{copy / 'mlflow.db'}"
    result = _evaluate(copy / path.name, copied_uri, "--lengths", "64", "--local", "--visualise")
    assert result.returncode == 0, result.stdout + result.stderr
    assert _snapshot(original) == before  # nothing written into the original's folders
    client = MlflowClient(copied_uri)
    (run,) = client.search_runs([client.get_experiment_by_name("moving").experiment_id],
                                "tags.`orchestrator.role` = 'trial'")
    assert run.info.artifact_uri.startswith((copy / "artifacts").as_uri())
    assert "ppl_64" in run.data.metrics and list((copy / "artifacts").rglob("attention/*"))

    alone.mkdir()  # the database copied without its artifacts folder
    shutil.copy2(original / "mlflow.db", alone / "mlflow.db")
    shutil.copy2(path, alone / path.name)
    result = _evaluate(alone / path.name, f"sqlite:///{alone / 'mlflow.db'}", "--lengths", "64", "--local")
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"its own artifacts folder {alone / 'artifacts'} is missing" in " ".join(result.stderr.split())
    assert _snapshot(original) == before


def _values_per_pair(uri, name, metrics):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(name).experiment_id], "tags.`orchestrator.role` = 'trial'")
    return {(run.data.tags["label"], metric): len(client.get_metric_history(run.info.run_id, metric))
            for run in runs for metric in metrics}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_evaluations_at_once_score_each_run_and_length_once(tmp_path, monkeypatch):
    import threading

    from test_evaluate import _train

    from orchestrator import parse_study
    from orchestrator.evaluation import runner, worker
    from orchestrator.evaluation.request import EvalRequest
    from orchestrator.run_context import RunContext

    monkeypatch.chdir(tmp_path)
    path, uri = _train(tmp_path, "twice", [32])
    study = parse_study(yaml.safe_load(path.read_text()))
    real, first_evaluating, second_done = worker.evaluate_task, threading.Event(), threading.Event()

    def held_open(task: dict) -> dict:  # the first command is still evaluating when the second plans
        if threading.current_thread().name == "first":
            first_evaluating.set()
            second_done.wait(120)
        return real(task)

    monkeypatch.setattr(worker, "evaluate_task", held_open)
    said = {"first": [], "second": []}
    outcomes = {}

    def evaluate(name):
        outcomes[name] = runner.evaluate_study(RunContext.open(study, uri, local=True), EvalRequest(lengths=(64, 128)),
                                               reports_dir=tmp_path / "reports", say=said[name].append)

    first = threading.Thread(target=evaluate, args=("first",), name="first")
    first.start()
    try:
        assert first_evaluating.wait(120)
        evaluate("second")
    finally:
        second_done.set()
        first.join(180)
    assert len(outcomes["first"].evaluated) == 2 and not outcomes["second"].evaluated
    assert any("4 (run, length) evaluation(s) are being done by another orchestrator" in line
               for line in said["second"]), said["second"]
    assert set(_values_per_pair(uri, "twice", ["ppl_64", "ppl_128", "ppl_by_length"]).values()) == {1, 3}
    assert all(count == 1 for (_, metric), count in _values_per_pair(uri, "twice", ["ppl_64", "ppl_128"]).items())


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_killed_evaluation_leaves_nothing_half_written_and_the_rerun_scores_what_is_missing(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient
    from test_evaluate import _train

    monkeypatch.chdir(tmp_path)
    path, uri = _train(tmp_path, "killed", [32])
    command = [sys.executable, "-m", "orchestrator", "evaluate", str(path), "--tracking-uri", uri, "--local",
               "--lengths", "64", "128", "256"]
    proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("killed").experiment_id
    try:
        _wait_for(lambda: any("ppl_64" in run.data.metrics for run in client.search_runs(
            [experiment], "tags.`orchestrator.role` = 'trial'")), 180, proc)
    finally:
        proc.kill()  # SIGKILL: no handler runs, its lease stays behind
        proc.wait(30)
    scored = _values_per_pair(uri, "killed", ["ppl_64", "ppl_128", "ppl_256", "ppl_by_length"])
    for label in {label for label, _ in scored}:  # per run: every value of its evaluation (series too), or none
        assert len({scored[label, metric] for metric in ("ppl_64", "ppl_128", "ppl_256")}) == 1, scored
        assert scored[label, "ppl_by_length"] == 1 + 3 * scored[label, "ppl_64"], scored
    rerun = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "another orchestrator" not in rerun.stdout  # the dead command's lease is taken over at once
    assert set(_values_per_pair(uri, "killed", ["ppl_64", "ppl_128", "ppl_256"]).values()) == {1}


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB file system (tmpfs; needs root, as in CI), unmounted afterwards."""
    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_full_disk_is_one_paragraph_the_store_stays_intact_and_the_rerun_resumes(small_disk):
    import sqlite3

    path = small_disk / "full.yaml"
    path.write_text(yaml.safe_dump({"name": "full", "base": BASE, "axes": {"model.n_layer": [1, 2, 3, 4]},
                                    "resources": {"cpus": 1}}))
    command = [sys.executable, "-m", "orchestrator", "run", str(path)]  # store, checkpoints, reports on the disk
    full = subprocess.run(command, cwd=small_disk, capture_output=True, text=True, timeout=300)
    output = full.stdout + full.stderr
    assert full.returncode == 3, output
    assert "No space left on device" in output or "disk is full" in output, output
    assert "Traceback" not in output and "ERROR mlflow" not in output, output
    assert "run the same command to resume" in " ".join(output.split())
    database = small_disk / "mlruns" / "mlflow.db"
    assert sqlite3.connect(database).execute("PRAGMA integrity_check").fetchall() == [("ok",)]

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)  # space again
    again = subprocess.run(command, cwd=small_disk, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    statuses = sqlite3.connect(database).execute(
        "SELECT t.value, r.status FROM runs r JOIN tags t ON t.run_uuid = r.run_uuid "
        "WHERE t.key = 'orchestrator.trial_id'").fetchall()
    finished = [trial for trial, status in statuses if status == "FINISHED"]
    assert len(finished) == len(set(finished)) == 4, statuses  # every trial, each finished once


def test_a_moved_store_keeps_the_layout_below_its_artifacts_folder(tmp_path):
    import sqlite3

    from orchestrator.tracking.relocation import ArtifactsMissing, relocate

    def store(folder, location):  # the two tables relocation reads and writes, as MLflow names them
        folder.mkdir()
        database = folder / "mlflow.db"
        connection = sqlite3.connect(database)
        with connection:
            connection.execute("CREATE TABLE experiments (experiment_id INTEGER, artifact_location TEXT)")
            connection.execute("CREATE TABLE experiment_tags (key TEXT, value TEXT, experiment_id INTEGER)")
            connection.execute("CREATE TABLE runs (run_uuid TEXT, experiment_id INTEGER, artifact_uri TEXT)")
            connection.execute("INSERT INTO experiments VALUES (1, ?)", (location,))
            connection.execute("INSERT INTO experiment_tags VALUES ('orchestrator.study', 's', 1)")
            connection.execute("INSERT INTO runs VALUES ('r', 1, ?)", (f"{location}/r/artifacts",))
        connection.close()
        return database

    def recorded(database):
        connection = sqlite3.connect(database)
        try:
            query = "SELECT e.artifact_location, r.artifact_uri FROM experiments e, runs r"
            return connection.execute(query).fetchone()
        finally:
            connection.close()

    here = store(tmp_path / "here", (tmp_path / "here" / "artifacts").as_uri())
    assert relocate(here) == 0  # where it was made: nothing to do, even without the folder yet
    # Made through an MLflow server with --default-artifact-root: artifacts/<experiment id>; then moved.
    served = store(tmp_path / "moved", (tmp_path / "elsewhere" / "artifacts" / "1").as_uri())
    with pytest.raises(ArtifactsMissing, match="is missing"):
        relocate(served)
    assert relocate(served, require=False) == 0 and recorded(served)[0].endswith("elsewhere/artifacts/1")
    (tmp_path / "moved" / "artifacts" / "1").mkdir(parents=True)
    assert relocate(served) == 1
    own = (tmp_path / "moved" / "artifacts" / "1").as_uri()
    assert recorded(served) == (own, f"{own}/r/artifacts")
    assert relocate(served) == 0  # once

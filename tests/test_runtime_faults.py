"""Faults outside the study file, each answered at once in one paragraph with its exit code (nothing hangs,
nothing is written where it should not be): a damaged, empty or unwritable tracking store, a foreign
experiment of the study's name, an unreachable tracking server or Ray cluster, resources no node can
host, an unreadable trial checkpoint; and the leases that let two orchestrators share one study.
Real MLflow SQLite stores, real Ray and real processes; only the faults are made by hand."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from cli_support import run_cli
from mlflow.tracking import MlflowClient

from orchestrator import expand, parse_study
from orchestrator.errors import ForeignExperiment, ResourcesUnavailable
from orchestrator.execution.cluster import fits, one_worker_bundles, require_placeable
from orchestrator.execution.leased import run_leased
from orchestrator.execution.runner import select_trials
from orchestrator.tracking import StudyStore
from orchestrator.tracking.leases import HEARTBEAT_TAG, LeaseBook

BASE = {
    "model": {"preset": "tiny", "pos_encoding": "alibi", "processor": "none"},
    "data": {"max_files": 300},
    "train": {"steps": 20, "batch_size": 8, "seq_len": 32, "log_every": 10},
    "eval": {"lengths": [32], "tail_tokens": 16, "n_windows": 4},
}


def _study(tmp_path, name="faulty", **extra) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"name": name, "base": BASE, **extra}))
    return path


def _one_paragraph(output: str) -> None:
    assert "Traceback" not in output and "sqlalchemy" not in output.lower(), output
    assert len(output.strip().splitlines()) <= 12, output  # the study line and one paragraph, soft-wrapped


@pytest.fixture
def recorded_store(tmp_path):
    """A real store holding a run of the study `faulty`: its parent run and one finished trial run."""
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    store = StudyStore.create(uri, "faulty")
    store.start_parent({"code_version": "test"})
    trial = expand(parse_study({"name": "faulty", "base": BASE}))[0]
    run_id = store.create_trial_run(trial.run_name, {"orchestrator.trial_id": trial.trial_id}, {"a": 1})
    store.end_trial_run(run_id, "FINISHED")
    store.end_parent()
    return tmp_path / "mlruns" / "mlflow.db"


@pytest.mark.parametrize("damage", ["truncated", "zero bytes", "random bytes"])
def test_a_damaged_store_is_one_paragraph_for_every_command_and_is_never_rewritten(damage, recorded_store, tmp_path,
                                                                                     capsys):
    data = recorded_store.read_bytes()
    recorded_store.write_bytes({"truncated": data[: len(data) // 2], "zero bytes": b"",
                                "random bytes": os.urandom(len(data))}[damage])
    before = recorded_store.read_bytes()
    study, uri = _study(tmp_path), f"sqlite:///{recorded_store}"
    expected = {"truncated": "the file is truncated", "zero bytes": "the file is empty (0 bytes)",
                "random bytes": "the file is not an SQLite database"}[damage]
    for command in ("status", "plan", "report", "run"):
        started = time.monotonic()
        code, output = run_cli(capsys, command, study, "--tracking-uri", uri)
        assert code == 2, (command, output)
        assert f"The tracking store {recorded_store} cannot be used: {expected}" in " ".join(output.split()), output
        assert "re-run" not in output and "resume" not in output
        _one_paragraph(output)
        assert time.monotonic() - started < 30, command  # at once, not minutes of SQLAlchemy retries
    assert recorded_store.read_bytes() == before  # no command wrote into it (no tables re-created)


def test_an_unwritable_store_folder_fails_at_once(tmp_path, capsys):
    # /sys refuses new files even to root, like a read-only mount does.
    code, output = run_cli(capsys, "run", _study(tmp_path), "--tracking-uri", "sqlite:////sys/mlflow.db")
    assert code == 2, output
    assert "The tracking store's folder /sys is not writable" in " ".join(output.split())
    _one_paragraph(output)


@pytest.mark.parametrize("option", ["--reports-dir", "--storage-dir"])
def test_an_unwritable_output_folder_fails_before_anything_runs(option, tmp_path, capsys):
    """Not after the last trial: the report's folder is checked with the store, before Ray or any run starts."""
    (tmp_path / "a_file").write_text("")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    for folder, reason in [(tmp_path / "a_file" / "out", "Not a directory"), (Path("/sys/out"), "")]:
        code, output = run_cli(capsys, "run", _study(tmp_path), "--tracking-uri", uri, option, folder)
        assert code == 2, output
        assert f"Invalid option {option}: cannot write into {folder} ({reason}" in " ".join(output.split())
        assert "Nothing was run" in output
        _one_paragraph(output)
    assert not (tmp_path / "mlflow.db").exists()  # no store, no parent run: nothing was launched
    if option == "--reports-dir":
        code, output = run_cli(capsys, "report", _study(tmp_path), "--tracking-uri", uri, option, tmp_path / "a_file")
        assert code == 2 and f"cannot write into {tmp_path / 'a_file'}" in " ".join(output.split()), output


def test_a_foreign_experiment_of_the_same_name_is_refused_and_left_alone(tmp_path, capsys):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    foreign = client.create_experiment("faulty")
    client.create_run(foreign, run_name="someone else's run")
    for command in ("run", "status"):
        code, output = run_cli(capsys, command, _study(tmp_path), "--tracking-uri", uri)
        assert code == 2, output
        text = " ".join(output.split())
        assert f"The tracking store {uri} already has an experiment named 'faulty'" in text
        assert "this tool did not create" in text and "another `name:`" in text
        _one_paragraph(output)
    assert [run.info.run_name for run in client.search_runs([foreign])] == ["someone else's run"]
    assert "orchestrator.study" not in client.get_experiment(foreign).tags


def test_an_untagged_experiment_is_not_adopted_for_its_runs(tmp_path):
    """Only the experiment tag makes an experiment the study's: one without it is refused even where it holds a
    run that looks like a study's parent run (this 0.1 tool has always tagged its experiments)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    untagged = client.create_experiment("faulty")
    client.create_run(untagged, run_name="faulty", tags={"orchestrator.role": "study"})
    with pytest.raises(ForeignExperiment, match="this tool did not create"):
        StudyStore.create(uri, "faulty")
    assert "orchestrator.study" not in client.get_experiment(untagged).tags


def test_an_unreachable_tracking_server_fails_at_once(tmp_path, capsys):
    for command in ("run", "status"):
        started = time.monotonic()
        code, output = run_cli(capsys, command, _study(tmp_path), "--tracking-uri", "http://127.0.0.1:9")
        assert code == 3, output
        assert "MLflow tracking server at http://127.0.0.1:9 is unreachable (" in output
        assert "Connection refused" in output
        assert output.splitlines()[-1].startswith("Stopped: MLflow tracking server") or \
            "\nStopped: MLflow tracking server" in output, output  # not "Study interrupted MLflow ..."
        assert "Study interrupted" not in output
        _one_paragraph(output)
        assert time.monotonic() - started < 10  # one probe, not MLflow's minutes of retries
    assert not (tmp_path / "mlruns").exists()


def test_a_server_whose_health_answers_but_not_its_api_is_named_so(tmp_path, capsys):
    """A fake server only to inject the fault: /health answers, every other request hangs (a server whose
    backend database is down). The message names what failed: the API, not /health."""
    import http.server

    release = threading.Event()

    class HalfAlive(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/health":
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"OK")
            else:
                release.wait(30)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HalfAlive)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        started = time.monotonic()
        code, output = run_cli(capsys, "run", _study(tmp_path), "--tracking-uri", uri, "--connect-timeout", "1")
    finally:
        release.set()
        server.shutdown()
    text = " ".join(output.split())
    assert code == 3, output
    assert f"MLflow tracking server at {uri} answers its /health but not its API (Read timed out)" in text
    assert "/health, given 1s (--connect-timeout), got no answer" not in text and "Nothing was started" in text
    _one_paragraph(output)
    assert time.monotonic() - started < 20


def test_a_locked_store_is_told_apart_from_a_damaged_one(recorded_store, tmp_path, capsys, monkeypatch):
    """Another process holding the store's lock (here: a connection of this process in an exclusive
    transaction, which SQLite locks against its other connections alike) is busy, not damaged: exit 3, no
    advice to move the file away; once it lets go the same command works."""
    import sqlite3

    from orchestrator.tracking import sqlite_file

    monkeypatch.setattr(sqlite_file, "LOCK_WAIT_S", 1)  # SQLite's wait, not 30 s
    before = recorded_store.read_bytes()
    holder = sqlite3.connect(recorded_store, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        for command in ("status", "run"):
            code, output = run_cli(capsys, command, _study(tmp_path), "--tracking-uri", f"sqlite:///{recorded_store}")
            text = " ".join(output.split())
            assert code == 3, (command, output)
            assert f"Store busy: The tracking store {recorded_store} is locked by another process (SQLite waited 1s " \
                   "for it: database is locked). The store is not damaged" in text, (command, text)
            assert "move the file away" not in text and "damaged, restore" not in text
            _one_paragraph(output)
    finally:
        holder.rollback()
        holder.close()
    assert recorded_store.read_bytes() == before
    code, output = run_cli(capsys, "status", _study(tmp_path), "--tracking-uri", f"sqlite:///{recorded_store}")
    assert code == 0, output


def test_no_negative_orchestration_overhead():
    """A trial resumed from its checkpoint reports its training since it first started: more trial work than
    this run's wall time. The share is then not given (the command says why), never negative."""
    from orchestrator.execution.runner import StudyOutcome

    measured = StudyOutcome(trials=[], skipped=[], wall_seconds=100.0, trial_seconds=150.0, concurrency=2)
    assert measured.overhead == pytest.approx(0.25) and not measured.overhead_inconsistent
    resumed = StudyOutcome(trials=[], skipped=[], wall_seconds=100.0, trial_seconds=118.2, concurrency=1)
    assert resumed.overhead is None and resumed.overhead_inconsistent


def _run_process(study, cwd, *args, timeout=600) -> tuple[int, str, float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(study), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{cwd / 'mlflow.db'}"})
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


def _no_runs_written(cwd, name) -> None:
    client = MlflowClient(f"sqlite:///{cwd / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(name)
    assert experiment is None or not client.search_runs([experiment.experiment_id]), "a run was created"


@pytest.mark.slow
def test_an_unreachable_ray_address_fails_within_the_timeout_before_any_run_is_created(tmp_path):
    code, output, _ = _run_process(_study(tmp_path), tmp_path, "--address", "127.0.0.1:9")
    assert code == 3, output
    assert "Cannot connect to the Ray cluster at 127.0.0.1:9 (Connection refused; one try" in output
    assert "No trial was run" in output and "Traceback" not in output
    _no_runs_written(tmp_path, "faulty")

    # A port that accepts connections but is no Ray head: ray.init would retry for minutes.
    with __import__("socket").socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        code, output, _ = _run_process(_study(tmp_path), tmp_path, "--address", f"127.0.0.1:{port}",
                                       "--connect-timeout", "3")
    assert code == 3, output
    assert f"The Ray cluster at 127.0.0.1:{port} did not answer within 3s (--connect-timeout)" in output
    _no_runs_written(tmp_path, "faulty")


@pytest.mark.parametrize("override, advice", [
    ("resources.gpus=0.5", "set resources.gpus: 0 (the trials then run on CPU)"),
    ("resources.cpus=64", "set resources.cpus to at most {cpus}"),
])
@pytest.mark.slow
def test_resources_no_node_has_are_refused_before_launch(override, advice, tmp_path, capsys, local_ray):
    # In this process, on the session's local Ray: the same check as after `orchestrator run` starts its own.
    cpus = int(local_ray.cluster_resources()["CPU"])
    started = time.monotonic()
    code, output = run_cli(capsys, "run", _study(tmp_path), "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
                        override)
    text = " ".join(output.split())
    assert code == 2, output
    assert "No node of the local Ray (this machine) can host a trial" in text, output
    assert advice.format(cpus=cpus) in text, output
    assert "No trial was run" in text and "Traceback" not in output
    # Before, the trial waited in Ray Tune for ever (or --resource-wait, 600 s by default); now it is refused at once.
    assert time.monotonic() - started < 60
    _no_runs_written(tmp_path, "faulty")


def test_the_placement_check_reads_one_node_at_a_time_and_refuses_what_none_can_host():
    nodes = [{"CPU": 8.0, "GPU": 0.0}, {"CPU": 2.0, "GPU": 1.0}]
    assert fits(one_worker_bundles(8, 0), nodes) and fits(one_worker_bundles(2, 0.5), nodes)
    assert not fits(one_worker_bundles(4, 1), nodes)  # 4 CPUs and a GPU exist, but on no one node
    with pytest.raises(ResourcesUnavailable, match="set resources.gpus to at most 1"):
        import orchestrator.execution.cluster as cluster

        original = cluster.live_nodes
        cluster.live_nodes = lambda: nodes
        try:
            require_placeable(one_worker_bundles(1, 2), "the test cluster", wait_s=0)
        finally:
            cluster.live_nodes = original


@pytest.mark.slow
def test_an_unreadable_trial_checkpoint_is_named_set_aside_and_the_trial_starts_over(tmp_path):
    study = _study(tmp_path, "ckpt")
    trial = expand(parse_study(yaml.safe_load(study.read_text())))[0]
    folder = tmp_path / ".orchestrator" / "checkpoints" / trial.trial_id
    folder.mkdir(parents=True)
    (folder / "trainer.pt").write_bytes(b"PK\x03\x04" + os.urandom(3000))  # a zip header, then garbage
    code, output, _ = _run_process(study, tmp_path, "--local")
    assert code == 0, output
    path = folder / "trainer.pt"
    assert f"checkpoint {path} cannot be read: the file is truncated or is not a torch checkpoint" in \
        " ".join(output.split()), output
    assert "weights_only" not in output and "Traceback" not in output
    (aside,) = folder.glob("trainer.pt.corrupt-*")
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("ckpt").experiment_id],
                                "tags.`orchestrator.role` = 'trial'")
    assert run.info.status == "FINISHED"
    assert str(path) in run.data.tags["checkpoint_set_aside"] and aside.name in run.data.tags["checkpoint_set_aside"]
    assert "resumed_from_step" not in run.data.metrics  # started from scratch, never from the bad file


# --- leases -----------------------------------------------------------------------------------------------------
def test_two_orchestrators_claiming_at_once_never_hold_one_trial_together(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    trials = {f"trial{number:02d}" for number in range(12)}
    books = [LeaseBook(StudyStore.create(uri, "faulty"), heartbeat_s=1) for _ in range(2)]
    start = threading.Barrier(2)

    def claim(book):
        start.wait()
        book.acquire(trials)

    threads = [threading.Thread(target=claim, args=(book,)) for book in books]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    first, second = (set(book.held) for book in books)
    assert not first & second  # never one trial in two hands
    assert first | second == trials  # and none lost: what one gave back while contested, the other kept
    for book in books:
        book.close()


def test_a_trial_finished_and_given_back_before_the_claim_is_not_run_again(tmp_path):
    """The second of two orchestrators reads its to-do list, then claims: a trial the first finished and gave
    back in between is done, not run a second time (it was, when the first ended while the second started)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    study = parse_study({"name": "faulty", "base": BASE, "axes": {"model.n_layer": [1, 2]}})
    done_by_first, left = expand(study)
    first = StudyStore.create(uri, "faulty")
    first.start_parent({"code_version": "test"})
    with LeaseBook(first, heartbeat_s=1) as first_leases:
        first_leases.acquire({done_by_first.trial_id})
        second = StudyStore.create(uri, "faulty")
        todo, _ = select_trials(study, expand(study), second)  # the second reads the store while the first trains
        assert [trial.trial_id for trial in todo] == [done_by_first.trial_id, left.trial_id]
        run_id = first.create_trial_run(done_by_first.run_name, {"orchestrator.trial_id": done_by_first.trial_id}, {})
        first.end_trial_run(run_id, "FINISHED")
        first_leases.release({done_by_first.trial_id})  # ... and gives the trial back before the second claims

    ran = []
    with LeaseBook(second, heartbeat_s=1) as second_leases:
        shared = run_leased(study, expand(study), todo, second, second_leases,
                            lambda batch: ran.extend(batch) or 1, print)
    assert ran == [left]
    assert shared.by_others == [done_by_first]


def test_a_dead_orchestrators_lease_is_taken_over_and_a_live_ones_is_not(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    live = LeaseBook(StudyStore.create(uri, "faulty"), heartbeat_s=1)
    live.acquire({"a"})
    dead = LeaseBook(StudyStore.create(uri, "faulty"))
    dead.acquire({"b"})
    dead._stop.set()  # its heartbeat stops, as when the process is killed ...
    dead.store.set_tags(dead.run_id, {HEARTBEAT_TAG: repr(time.time() - 3600)})  # ... an hour ago

    newcomer = LeaseBook(StudyStore.create(uri, "faulty"), expiry_s=60)
    blocked = newcomer.acquire({"a", "b"})
    assert newcomer.held == {"b"} and newcomer.taken_over == {"b"}
    assert set(blocked) == {"a"} and str(blocked["a"]) == f"pid {os.getpid()} on {__import__('socket').gethostname()}"
    assert MlflowClient(uri).get_run(dead.run_id).info.lifecycle_stage == "deleted"  # the dead lease is cleared
    live.close()
    assert newcomer.acquire({"a"}) == {} and newcomer.held == {"a", "b"}  # given back: free for the next
    newcomer.close()

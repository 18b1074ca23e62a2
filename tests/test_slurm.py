"""`orchestrator slurm STUDY --submit` against a real SLURM: munged, slurmctld and two slurmd (two SLURM nodes
on this machine, tests/slurm_support.py says how), on the loopback of the test's own network namespace.

The job the command writes starts Ray on both nodes (the head in the batch shell, the worker through srun),
serves the study's SQLite store with an MLflow server on the first node (which refuses a client without the
job's login: the test reads through it with that login), and runs the study; `scancel` in the
middle stops it, and submitting the same script again finishes the study without retraining what was done.
Needs root (the namespaces) and Debian's `slurm-wlm` and `munge` (`.ci/run` installs them).
"""

from __future__ import annotations

import json
import re
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import requests
import yaml
from cluster_support import BIN, loopback_network_namespace, processes_in_namespace
from slurm_support import Slurm

from orchestrator.slurm import server as server_login

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # 94-130 s a test here, daemons' start-up included

BASE = {
    "model": {"preset": "tiny", "pos_encoding": "kerple", "d_dape": 8},
    "data": {"max_files": 100},
    "train": {"steps": 600, "batch_size": 4, "seq_len": 32, "log_every": 40},
    "eval": {"lengths": [32, 64], "tail_tokens": 8, "n_windows": 4},
}
RAY_DAEMONS = ("raylet", "gcs_server")


@pytest.fixture(scope="module")
def slurm():
    root = Path(tempfile.mkdtemp(prefix="dape-slurm-"))
    cluster = Slurm(root / "slurm", nodes=2, cpus=1)
    try:
        with loopback_network_namespace() as namespace:
            try:
                cluster.start()
                cluster.namespace = namespace
                yield cluster
            finally:
                cluster.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def write_study(folder: Path, spec: dict) -> Path:
    (folder / "studies").mkdir(exist_ok=True)
    path = folder / "studies" / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def orchestrator_slurm(slurm: Slurm, study: Path, *options: str) -> subprocess.CompletedProcess:
    argv = [str(BIN / "orchestrator"), "slurm", str(study), "--nodes", "2", "--cpus-per-node", "1", *options]
    return subprocess.run(argv, cwd=study.parent.parent, capture_output=True, text=True, timeout=120, env=slurm.env)


def submitted_job(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    return re.search(r"Submitted job (\d+)", result.stdout).group(1)


def ray_processes(namespace: str) -> list[str]:
    found = []
    for pid in processes_in_namespace(namespace):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(daemon in command for daemon in RAY_DAEMONS) or "orchestrator run" in command:
            found.append(command)
    return found


def trial_runs(tracking_uri: str, study: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name(study)
    if experiment is None:
        return []
    return client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'trial'")


def trained_steps(tracking_uri: str, run) -> int:
    from mlflow.tracking import MlflowClient

    history = MlflowClient(tracking_uri).get_metric_history(run.info.run_id, "train_loss")
    return max((metric.step for metric in history), default=0)


def job_log(folder: Path, study: str, job_id: str) -> str:
    path = folder / "slurm" / f"orchestrator-{study}-{job_id}.out"
    return path.read_text(errors="replace") if path.exists() else f"(no log at {path})"


def ended_log(folder: Path, study: str, job_id: str, timeout: float = 90) -> str:
    """The job's log once its batch script has ended (its last line, "Job N ends with exit code C."). SLURM says
    CANCELLED as soon as scancel is taken, while the script is still stopping the study, Ray and the MLflow server
    (up to its 15 s bound, inside KillWait): reading the log or looking for processes at that point races it."""
    deadline = time.monotonic() + timeout
    while f"Job {job_id} ends with exit code" not in (log := job_log(folder, study, job_id)):
        assert time.monotonic() < deadline, f"the job's script did not end within {timeout:.0f}s\n{log}"
        time.sleep(0.5)
    return log


def test_a_study_runs_as_a_slurm_job_on_two_nodes_and_a_resubmission_resumes_it(slurm, tmp_path, monkeypatch):
    name = "slurm_two_nodes"
    # Long enough that a trial caught early at the cancel is still training when its node stops (up to 10 s
    # later): at 600 steps a tiny trial trained to its end in that window on an idle machine and, its result not
    # yet recorded, was trained again from step 0 (its finished trial had removed its checkpoints).
    steps = 1800
    spec = {"name": name, "base": {**BASE, "train": {**BASE["train"], "steps": steps, "log_every": 60}},
            "variants": [{"label": "Kerple", "baseline": True, "set": {"model.processor": "none"}},
                         {"label": "DAPE-Kerple", "set": {"model.processor": "dapev2", "model.kernel_size": 1}}],
            "seeds": [0, 1], "resources": {"cpus": 1, "max_retries": 0}}
    study = write_study(tmp_path, spec)
    database = tmp_path / "mlruns" / "mlflow.db"
    started = time.monotonic()
    job = submitted_job(orchestrator_slurm(slurm, study, "--submit", "--join-timeout", "120"))
    script = tmp_path / "slurm" / f"{name}.sbatch"
    assert script.is_file()

    # While the job runs, its MLflow server is the store's only reader and writer: the test reads through it.
    deadline = time.monotonic() + 300
    while not (server := re.search(r"MLflow server for this job: (\S+)", job_log(tmp_path, name, job))):
        assert slurm.job_state(job) in ("PENDING", "RUNNING"), job_log(tmp_path, name, job)
        assert time.monotonic() < deadline, f"no MLflow server in time\n{job_log(tmp_path, name, job)}"
        time.sleep(0.5)
    # The server asks for the login made for the job (tests/test_slurm_auth.py): refused without it, its owner's
    # file only; the test reads through it with the login, as the driver does.
    credentials = tmp_path / "slurm" / f"job-{job}" / server_login.CREDENTIALS_FILE
    assert stat.S_IMODE(credentials.stat().st_mode) == 0o600
    login = server_login.read_login(credentials)
    assert login["MLFLOW_TRACKING_URI"] == server.group(1)
    search = f"{server.group(1)}/api/2.0/mlflow/experiments/search?max_results=5"
    assert requests.get(search, timeout=30).status_code == 401
    assert requests.get(search, timeout=30, auth=(login["MLFLOW_TRACKING_USERNAME"], "guess")).status_code == 401
    for key in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        monkeypatch.setenv(key, login[key])
    # Cancel the job once a trial has finished and another is still training, past its first checkpoint.
    while True:
        runs = trial_runs(server.group(1), name)
        checkpointed = {run.data.tags["orchestrator.trial_id"] for run in runs
                        if run.info.status == "RUNNING"
                        and steps // 10 <= trained_steps(server.group(1), run) <= steps * 0.4}
        if checkpointed and any(run.info.status == "FINISHED" for run in runs):
            break
        assert slurm.job_state(job) in ("PENDING", "RUNNING"), job_log(tmp_path, name, job)
        assert time.monotonic() < deadline, f"no trial finished in time\n{job_log(tmp_path, name, job)}"
        time.sleep(0.5)
    first_trial = time.monotonic() - started
    assert slurm.run("scancel", job).returncode == 0
    assert slurm.wait_job(job, {"CANCELLED", "COMPLETED", "FAILED"}, 120) == "CANCELLED"
    log = ended_log(tmp_path, name, job)
    assert "All 2 node(s) joined Ray: 127.0.0.11, 127.0.0.12" in log, log  # each at its SLURM NodeAddr
    assert "Stop requested (cancelled or preempted)" in log and "Stopping Ray and the job's services" in log, log
    time.sleep(2)  # SLURM's KillWait: whatever ignored TERM gets KILL; nothing of Ray or the study may be left
    assert ray_processes(slurm.namespace) == []
    assert not credentials.parent.exists()  # the login ended with the job's server
    before = {run.data.tags["orchestrator.trial_id"]: run for run in trial_runs(f"sqlite:///{database}", name)
              if run.info.status == "FINISHED"}
    assert 1 <= len(before) < 4
    cancelled_at = time.monotonic()

    resubmitted = slurm.run("sbatch", "--parsable", str(script))  # what a researcher does: the same script again
    assert resubmitted.returncode == 0, resubmitted.stderr
    job2 = resubmitted.stdout.strip()
    assert slurm.wait_job(job2, {"CANCELLED", "COMPLETED", "FAILED"}, 400) == "COMPLETED", job_log(tmp_path, name, job2)
    resumed = time.monotonic() - cancelled_at
    log2 = ended_log(tmp_path, name, job2)
    assert f"{len(before)} trial(s) already finished in the tracking store: not rerun" in log2, log2
    assert f"Running {4 - len(before)} trial(s) on Ray (2 CPUs)" in log2, log2

    runs = trial_runs(f"sqlite:///{database}", name)
    finished = {run.data.tags["orchestrator.trial_id"]: run for run in runs if run.info.status == "FINISHED"}
    assert len(finished) == 4 == len([run for run in runs if run.info.status == "FINISHED"])
    # The runs the cancel cut short were closed by the next job as stale, and their trials continued from the
    # checkpoints the first job left in the shared storage folder (one every tenth of the steps).
    stale = [run for run in runs if run.info.status != "FINISHED"]
    assert stale and all(run.info.status == "KILLED" and run.data.tags["orchestrator.stale"] == "true" for run in stale)
    for trial_id in checkpointed - set(before):  # training past its first checkpoint at the cancel
        assert 0 < finished[trial_id].data.metrics.get("resumed_from_step", 0) < steps, finished[trial_id].data.metrics
    for trial_id, run in before.items():  # not retrained: the same runs, the same metrics
        assert finished[trial_id].info.run_id == run.info.run_id
        assert finished[trial_id].data.metrics == run.data.metrics
    report = (tmp_path / "reports" / name / "report.md").read_text()
    assert re.search(r"^\| Kerple +\| +\**[\d.]+ ± [\d.]+\** +\| +\**[\d.]+ ± [\d.]+\** +\| 2/2 ", report, re.M), report
    assert ray_processes(slurm.namespace) == []
    assert not list(Path("/tmp").glob(f"orchestrator-ray-{job2}-*"))  # both nodes' Ray folders removed
    print(f"\nSLURM timings: first trial finished {first_trial:.0f}s after submission; resubmitted job "
          f"completed {resumed:.0f}s after the cancel")


def test_a_decide_job_adds_seeds_in_the_job_and_records_its_looks(slurm, tmp_path):
    # `orchestrator slurm --decide`: the job's `orchestrator run` runs the sequence of looks on the job's Ray and
    # records them on the study's run, in the job's store. 2 training steps against 40: the longer training's
    # loss is far below on every seed, so the first look (2 seeds) decides and the sequence stops there.
    name = "slurm_decide"
    spec = {"name": name, "base": {**BASE, "train": {**BASE["train"], "steps": 40, "log_every": 20}},
            "variants": [{"label": "short", "baseline": True, "set": {"train.steps": 2}},
                         {"label": "long", "set": {}}],
            "seeds": [0], "resources": {"cpus": 1, "max_retries": 0}, "keep_weights": "none",
            "expect": [{"id": "longer_is_lower", "kind": "compare", "source": "test", "variant": "long",
                        "direction": "below", "metric": "train_loss"}]}
    study = write_study(tmp_path, spec)
    job = submitted_job(orchestrator_slurm(slurm, study, "--submit", "--decide", "decide.max_seeds=4"))
    assert slurm.wait_job(job, {"CANCELLED", "COMPLETED", "FAILED"}, 400) == "COMPLETED", job_log(tmp_path, name, job)
    log = " ".join(ended_log(tmp_path, name, job).split())
    assert "Look 1 of at most 2: 2 seeds for every row (2)" in log and "Look 2" not in log, log
    assert "longer_is_lower" in log and "1 of 1 claim decided" in log, log
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    runs = trial_runs(uri, name)
    assert sorted(run.info.status for run in runs) == ["FINISHED"] * 4  # 2 rows x min_seeds 2, nothing more
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(name)
    parent = client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'study'")[0]
    looks = json.loads(Path(client.download_artifacts(parent.info.run_id, "looks.json")).read_text())
    assert [look["seeds"] for look in looks["looks"]] == [2]
    assert [(claim["id"], claim["status"], claim["seeds"]) for claim in looks["claims"]] == \
        [("longer_is_lower", "decided", 2)]
    assert ray_processes(slurm.namespace) == []


def test_the_time_limit_stops_the_study_cleanly_and_the_job_requeues_itself(slurm, tmp_path):
    name = "slurm_time_limit"
    spec = {"name": name, "base": BASE,
            "variants": [{"label": "Kerple", "set": {}}], "seeds": [0, 1, 2],
            "resources": {"cpus": 1, "max_retries": 0}}
    study = write_study(tmp_path, spec)
    job = submitted_job(orchestrator_slurm(slurm, study, "--submit", "--requeue", "--nodes", "1"))
    deadline = time.monotonic() + 300
    while ": started" not in job_log(tmp_path, name, job):  # "[1/3] Kerple · s0: started": a trial is training
        assert slurm.job_state(job) in ("PENDING", "RUNNING"), job_log(tmp_path, name, job)
        assert time.monotonic() < deadline, job_log(tmp_path, name, job)
        time.sleep(0.5)
    # What SLURM does --signal-grace seconds before the time limit: USR1 to the batch shell alone.
    assert slurm.run("scancel", "--batch", "--signal=USR1", job).returncode == 0
    # The job requeues itself: SLURM holds a requeued job back for about two minutes before it runs again (and
    # resumes, as a resubmission does in the test above), so the test stops at the requeue.
    deadline = time.monotonic() + 120
    # Requeued: restarted once and pending again (it passes through COMPLETING with Restarts=1 on the way).
    while not ("Restarts=1" in (shown := slurm.scontrol("show", "job", job).stdout) and "JobState=PENDING" in shown):
        assert slurm.job_state(job) in ("RUNNING", "COMPLETING", "REQUEUED", "PENDING"), job_log(tmp_path, name, job)
        assert time.monotonic() < deadline, (shown, job_log(tmp_path, name, job))
        time.sleep(0.5)
    assert slurm.run("scancel", job).returncode == 0
    log = " ".join(job_log(tmp_path, name, job).split())
    assert "Stop requested (timeout): stopping the study cleanly." in log, log
    # The study itself stopped cleanly: its running trial's run closed as KILLED, not left to a later job.
    assert "running trial(s) were stopped and their runs closed as KILLED" in log, log
    # SLURM's own "*** JOB N ON node1 CANCELLED ... DUE TO JOB REQUEUE ***" may land between the two lines.
    requeued, ended = f"Requeueing job {job}: it resumes the study.", f"Job {job} ends with exit code 130."
    assert requeued in log and ended in log and log.index(requeued) < log.rindex(ended), log
    runs = trial_runs(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}", name)
    killed = [run for run in runs if run.info.status == "KILLED"]
    assert killed and not any(run.data.tags.get("orchestrator.stale") for run in killed)
    assert not [run for run in runs if run.info.status == "RUNNING"]
    assert ray_processes(slurm.namespace) == []


def test_a_node_that_never_joins_stops_the_job_after_the_bound_leaving_nothing(slurm, tmp_path):
    name = "slurm_lost_node"
    spec = {"name": name, "base": BASE, "variants": [{"label": "Kerple", "set": {}}], "seeds": [0]}
    study = write_study(tmp_path, spec)
    # The fault: the second node's Ray worker never starts (its srun hangs, as on a node that lost its network).
    lost = 'srun() { echo "srun: (injected fault) the other node does not answer"; sleep 600; }'
    started = time.monotonic()
    job = submitted_job(orchestrator_slurm(slurm, study, "--submit", "--join-timeout", "15",
                                           "--setup", f". {BIN / 'activate'}", "--setup", lost))
    assert slurm.wait_job(job, {"CANCELLED", "COMPLETED", "FAILED"}, 120) == "FAILED"
    took = time.monotonic() - started
    log = ended_log(tmp_path, name, job)
    assert "Only 1 of 2 node(s) joined Ray within 15s (--join-timeout): 127.0.0.11. The job stops without running " \
           "the study" in log, log
    assert "Job " + job + " ends with exit code 1." in log, log
    assert not (tmp_path / "mlruns").exists()  # no server was started, no store created
    assert ray_processes(slurm.namespace) == []
    assert not [pid for pid in processes_in_namespace(slurm.namespace)
                if b"sleep\x00600" in Path(f"/proc/{pid}/cmdline").read_bytes()]  # the hung srun was stopped too
    print(f"\nSLURM lost node: the job failed {took:.0f}s after submission (join timeout 15s)")


def test_a_partition_slurm_rejects_is_refused_with_slurms_message(slurm, tmp_path):
    study = write_study(tmp_path, {"name": "slurm_bad_partition", "base": BASE,
                                   "variants": [{"label": "Kerple", "set": {}}], "seeds": [0]})
    result = orchestrator_slurm(slurm, study, "--submit", "--partition", "nosuch")
    assert result.returncode == 2, result.stdout + result.stderr
    text = " ".join(result.stderr.split())
    assert "SLURM refused the job: sbatch: error: invalid partition specified: nosuch" in text, text
    assert "Nothing was submitted" in text and "Traceback" not in text
    assert not (tmp_path / "slurm" / "slurm_bad_partition.sbatch").exists()
    assert "orchestrator-slurm_bad_partition" not in slurm.run("squeue", "--noheader", "--format=%j").stdout

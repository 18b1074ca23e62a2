"""Studies on a real cluster: a two-node Ray cluster (`ray start --head`, `ray start --address`) with token
authentication, logging to a real `mlflow server` backed by a real PostgreSQL, driven by the real command line
(`orchestrator run STUDY --address ... --tracking-uri ...`).

Everything listens on 127.0.0.1 only, inside a network namespace that has nothing but the loopback (see
tests/cluster_support.py). Needs root (for the namespace) and Debian's `postgresql` package.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg2
import pytest
import yaml
from cluster_support import BIN, MlflowServer, Postgres, RayNode, cluster_env, finish, loopback_network_namespace
from mlflow.tracking import MlflowClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # PostgreSQL and two Ray nodes start in the first

BASE = {
    "model": {"preset": "tiny", "pos_encoding": "kerple", "d_dape": 8},
    "data": {"max_files": 100},
    "train": {"steps": 20, "batch_size": 4, "seq_len": 32, "log_every": 5},
    "eval": {"lengths": [32, 64], "tail_tokens": 8, "n_windows": 4},
}


@dataclass
class Cluster:
    root: Path
    postgres: Postgres
    mlflow: MlflowServer
    head: RayNode
    worker: RayNode
    env: dict  # what every Ray process shares: token authentication, private HOME and TMPDIR

    def orchestrator(self, study: Path, workdir: Path, env: dict | None = None) -> subprocess.Popen:
        argv = [str(BIN / "orchestrator"), "run", str(study), "--address", self.head.address,
                "--tracking-uri", self.mlflow.url, "--reports-dir", str(workdir / "reports")]
        return subprocess.Popen(argv, cwd=workdir, env=env or self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def cluster():
    root = Path(tempfile.mkdtemp(prefix="dape-cluster-"))
    root.chmod(0o755)  # PostgreSQL runs as its own user and must reach its data folder inside
    services = []
    try:
        with loopback_network_namespace():
            postgres = Postgres(root / "postgres")
            mlflow = MlflowServer(postgres.uri, root)
            env = cluster_env(root, token=secrets.token_hex(32))
            head, worker = RayNode(root, env), RayNode(root, env, head=False)
            try:
                for service in (postgres, mlflow, head, worker):
                    services.append(service)
                    service.start()
                yield Cluster(root, postgres, mlflow, head, worker, env)
            finally:
                for service in reversed(services):
                    service.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def write_study(folder: Path, spec: dict) -> Path:
    path = folder / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def trial_runs(client: MlflowClient, study: str) -> list:
    experiment = client.get_experiment_by_name(study)
    if experiment is None:
        return []
    return client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'trial'")


def test_study_runs_on_both_nodes_logs_to_the_server_and_reports_from_it(cluster, tmp_path):
    spec = {"name": "cluster_two_nodes", "base": BASE,
            "variants": [{"label": "Kerple", "baseline": True, "set": {"model.processor": "none"}},
                         {"label": "DAPE-Kerple", "set": {"model.processor": "dapev2", "model.kernel_size": 1}}],
            "seeds": [0], "resources": {"cpus": 1, "max_retries": 0}}
    process = cluster.orchestrator(write_study(tmp_path, spec), tmp_path)
    output = finish(process, timeout=180)
    assert process.returncode == 0, output
    assert "Running 2 trial(s) on Ray (2 CPUs)" in output  # the driver joined the two-node cluster

    client = MlflowClient(cluster.mlflow.url)
    runs = trial_runs(client, "cluster_two_nodes")
    assert sorted(run.data.tags["label"] for run in runs) == ["DAPE-Kerple", "Kerple"]
    assert all(run.info.status == "FINISHED" for run in runs)
    # One CPU per node and one CPU per trial: the two concurrent trials can only run on different nodes.
    nodes = {run.data.tags["ray_node_id"] for run in runs}
    assert len(nodes) == 2 and all(re.fullmatch(r"[0-9a-f]{56}", node) for node in nodes), nodes

    # The report is built from the server's runs: its cells are the server's metrics.
    report = (tmp_path / "reports" / "cluster_two_nodes" / "report.md").read_text()
    for run in runs:
        row = next(line for line in report.splitlines() if line.startswith(f"| {run.data.tags['label']} "))
        cells = [cell.strip().strip("*") for cell in row.strip("|").split("|")]  # best per column is in bold
        assert cells[1:3] == [f"{run.data.metrics['ppl_32']:.3f}", f"{run.data.metrics['ppl_64']:.3f}"]

    # The report went through the server's artifact proxy into its artifact folder.
    parent_id = runs[0].data.tags["mlflow.parentRunId"]
    assert "report.md" in [artifact.path for artifact in client.list_artifacts(parent_id)]
    assert list((cluster.root / "artifacts").rglob("report.md"))

    # And the runs live in PostgreSQL, the server's backend store.
    with psycopg2.connect(host="127.0.0.1", port=cluster.postgres.port, user=Postgres.user,
                          password=Postgres.password, dbname=Postgres.database) as connection:
        with connection.cursor() as cursor:
            # Active runs only: the orchestrator's lease run (leases.py) is deleted when the study ends.
            cursor.execute("SELECT status FROM runs JOIN experiments USING (experiment_id) WHERE experiments.name = %s "
                           "AND runs.lifecycle_stage = 'active'", ("cluster_two_nodes",))
            assert sorted(status for (status,) in cursor.fetchall()) == ["FINISHED"] * 3  # parent + 2 trials
    connection.close()


@pytest.mark.timeout(900)  # its run is bounded at 600 s
def test_a_two_worker_trial_spans_both_nodes(cluster, tmp_path):
    """A multi-worker trial is a Ray Train run inside its Tune trial: with one CPU per node and per worker,
    its two workers can only start on different nodes, and still make one trial run with rank 0's results."""
    spec = {"name": "cluster_two_workers", "base": BASE,
            "variants": [{"label": "DAPE-Kerple", "set": {"model.processor": "dapev2", "model.kernel_size": 1}}],
            # seed 5: a trial of its own (a trial another study of the shared store finished would be reused)
            "seeds": [5], "resources": {"cpus": 1, "workers": 2, "parallelism": "fsdp", "max_retries": 0}}
    process = cluster.orchestrator(write_study(tmp_path, spec), tmp_path)
    output = finish(process, timeout=600)  # Ray Train starts two more worker processes (torch, the corpus)
    assert process.returncode == 0, output

    (run,) = trial_runs(MlflowClient(cluster.mlflow.url), "cluster_two_workers")
    assert run.info.status == "FINISHED"
    assert (run.data.params["distributed.workers"], run.data.params["distributed.parallelism"]) == ("2", "fsdp")
    nodes = run.data.tags["worker_node_ids"].split(",")
    assert len(nodes) == 2 and len(set(nodes)) == 2, nodes  # rank 0 and rank 1 on different nodes
    assert run.data.tags["ray_node_id"] == nodes[0]
    assert {"ppl_32", "ppl_64"} <= set(run.data.metrics)


def test_tracking_server_stopped_mid_study_fails_clearly_and_the_rerun_loses_nothing(cluster, tmp_path):
    # 300 steps: the running trial must still be training when the server stops (a trial process that Tune
    # reuses trains 20 tiny steps in a fraction of a second, less than this test takes to see it running).
    spec = {"name": "cluster_outage", "base": {**BASE, "train": {**BASE["train"], "steps": 300, "log_every": 50}},
            "variants": [{"label": "Kerple", "baseline": True, "set": {"model.processor": "none"}}],
            "seeds": [0, 1, 2], "resources": {"cpus": 1, "max_retries": 0, "max_concurrent": 1}}
    study = write_study(tmp_path, spec)
    # Fail within seconds instead of after MLflow's default retries (minutes).
    env = {**cluster.env, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
    client = MlflowClient(cluster.mlflow.url)

    process = cluster.orchestrator(study, tmp_path, env=env)
    deadline = time.monotonic() + 180
    # Trials run one at a time: stop the server once one has finished and the next one is running.
    while {"FINISHED", "RUNNING"} - {run.info.status for run in trial_runs(client, "cluster_outage")}:
        assert process.poll() is None, process.communicate()[0]
        assert time.monotonic() < deadline, "no trial finished in time"
        time.sleep(0.3)
    cluster.mlflow.stop()
    output = finish(process, timeout=120)

    assert process.returncode == 3, output
    assert f"MLflow tracking server at {cluster.mlflow.url} is unreachable" in output
    assert "Connection refused" in output and "run the same command again" in output
    assert "Traceback" not in output

    cluster.mlflow.start()
    before = {run.data.tags["orchestrator.trial_id"]: run for run in trial_runs(client, "cluster_outage")
              if run.info.status == "FINISHED"}
    assert 1 <= len(before) < 3

    process = cluster.orchestrator(study, tmp_path, env=env)
    output = finish(process, timeout=180)
    assert process.returncode == 0, output
    assert f"{len(before)} trial(s) already finished in the tracking store: not rerun" in output
    assert f"Running {3 - len(before)} trial(s) on Ray" in output

    runs = trial_runs(client, "cluster_outage")
    finished = {run.data.tags["orchestrator.trial_id"]: run for run in runs if run.info.status == "FINISHED"}
    assert len(finished) == 3 == len([run for run in runs if run.info.status == "FINISHED"])
    for trial_id, run in before.items():  # the trials finished before the outage are the same runs, untouched
        assert finished[trial_id].info.run_id == run.info.run_id
        assert finished[trial_id].data.metrics == run.data.metrics
    # The trial cut short by the outage was left RUNNING; the rerun closed that run as KILLED and redid the trial.
    (stale,) = [run for run in runs if run.info.status != "FINISHED"]
    assert stale.info.status == "KILLED" and stale.data.tags["orchestrator.stale"] == "true"
    assert stale.data.tags["orchestrator.trial_id"] not in before
    report = (tmp_path / "reports" / "cluster_outage" / "report.md").read_text()
    assert re.search(r"^\| Kerple +\| \**[\d.]+ ± [\d.]+\** +\| \**[\d.]+ ± [\d.]+\** +\| 3/3 ", report, re.M), report


def test_driver_without_the_cluster_token_is_refused_clearly(cluster, tmp_path):
    # seed 6: a trial no other study of the shared store finished, so that the run needs Ray (a finished one is
    # reused from the store without it)
    spec = {"name": "cluster_no_token", "base": BASE, "variants": [{"label": "Kerple", "set": {}}], "seeds": [6]}
    env = {key: value for key, value in cluster.env.items() if not key.startswith("RAY_AUTH_")}
    env["RAY_gcs_server_port_wait_time_s"] = "2"  # Ray retries the connection for 20s by default
    process = cluster.orchestrator(write_study(tmp_path, spec), tmp_path, env=env)
    output = finish(process, timeout=120)
    assert process.returncode == 3, output
    assert f"The Ray cluster at {cluster.head.address} did not accept this driver's authentication" in output
    assert "RAY_AUTH_MODE is unset" in output and "No trial was run" in output
    assert "Traceback" not in output
    client = MlflowClient(cluster.mlflow.url)
    assert trial_runs(client, "cluster_no_token") == []


def test_unreachable_tracking_server_at_start_is_reported_clearly(tmp_path):
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    spec = {"name": "no_server", "base": BASE, "variants": [{"label": "Kerple", "set": {}}], "seeds": [0]}
    argv = [str(BIN / "orchestrator"), "run", str(write_study(tmp_path, spec)),
            "--tracking-uri", f"http://127.0.0.1:{port}"]
    result = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"})
    assert result.returncode == 3, result.stdout + result.stderr
    assert f"MLflow tracking server at http://127.0.0.1:{port} is unreachable ([Errno 111] Connection refused)" in (
        " ".join(result.stderr.split()))
    # One probe before anything starts, not the MLflow client's retries (minutes by default).
    assert "Nothing was started" in result.stderr and "Traceback" not in result.stderr

"""The SLURM job's MLflow server asks for a login made for the job (orchestrator/slurm/server.py): its files
are its owner's only, the secrets never reach a command line, and the REAL server (`mlflow server --app-name
basic-auth`, started here on loopback exactly as the job starts it) refuses a client without the login and
serves one with it. The two-node SLURM test (test_slurm.py) reads its job's server through the same login."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from base64 import b64encode
from pathlib import Path

import pytest

from orchestrator.slurm import server
from orchestrator.slurm.node import free_port
from orchestrator.tracking.client import TrackingLoginRefused, probe_server


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_login_is_random_per_job_and_readable_by_its_owner_only(tmp_path):
    old = os.umask(0o000)  # the most permissive umask: the files must still be private
    try:
        first = server.write_login(tmp_path / "job-1", "http://10.1.0.7:5123")
        second = server.write_login(tmp_path / "job-2", "http://10.1.0.7:5124")
    finally:
        os.umask(old)
    assert first.password != second.password and len(first.password) >= 24
    folder = tmp_path / "job-1"
    assert mode(folder) == 0o700
    assert {path.name: mode(path) for path in folder.iterdir()} == {server.CREDENTIALS_FILE: 0o600,
                                                                     server.AUTH_CONFIG_FILE: 0o600}
    login = server.read_login(folder / server.CREDENTIALS_FILE)
    assert login == {"MLFLOW_TRACKING_URI": "http://10.1.0.7:5123", "MLFLOW_TRACKING_USERNAME": "orchestrator",
                     "MLFLOW_TRACKING_PASSWORD": first.password}
    # The file is also a shell script a user can source (`set -a; . FILE; set +a`).
    shown = subprocess.run(["bash", "-c", f"set -a; . {folder / server.CREDENTIALS_FILE}; set +a; "
                            "echo $MLFLOW_TRACKING_USERNAME:$MLFLOW_TRACKING_PASSWORD"],
                           capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == f"orchestrator:{first.password}"
    # The password never goes on the server's command line (`ps` shows it to every user): only in its environment.
    argv = server.server_argv("10.1.0.7", 5123, "sqlite:////p/mlruns/mlflow.db", "file:///p/mlruns/artifacts")
    environment = server.server_env(folder, first, {})
    assert first.password not in " ".join(argv) and ["--app-name", "basic-auth"] == argv[2:4]
    assert environment["MLFLOW_AUTH_ADMIN_PASSWORD"] == first.password
    assert environment["MLFLOW_AUTH_CONFIG_PATH"] == str(folder / server.AUTH_CONFIG_FILE)
    assert first.password not in (folder / server.AUTH_CONFIG_FILE).read_text()
    assert f"auth_cache_ttl_seconds = {server.AUTH_CACHE_S}" in (folder / server.AUTH_CONFIG_FILE).read_text()
    # A requeued job (same id) after a hard kill: the old user database goes, the new password is the one used.
    (folder / server.AUTH_DATABASE_FILE).write_text("stale")
    again = server.write_login(folder, "http://10.1.0.7:5125")
    assert not (folder / server.AUTH_DATABASE_FILE).exists()
    assert server.read_login(folder / server.CREDENTIALS_FILE)["MLFLOW_TRACKING_PASSWORD"] == again.password


def status_of(url: str, login: tuple[str, str] | None = None) -> int:
    request = urllib.request.Request(url)
    if login:
        request.add_header("Authorization", "Basic " + b64encode(f"{login[0]}:{login[1]}".encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:  # not listening yet
        return 0


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_jobs_mlflow_server_refuses_a_client_without_its_login(tmp_path, monkeypatch):
    store, artifacts, folder = tmp_path / "mlruns" / "mlflow.db", tmp_path / "mlruns" / "artifacts", tmp_path / "job-7"
    artifacts.mkdir(parents=True)
    port = free_port("127.0.0.1")
    base = f"http://127.0.0.1:{port}"
    # The job's own command (`node mlflow-server`), in a session of its own: stopped by its process id below.
    process = subprocess.Popen([sys.executable, "-m", "orchestrator.slurm.node", "mlflow-server", str(folder),
                                "127.0.0.1", str(port), f"sqlite:///{store}", artifacts.as_uri()],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while status_of(f"{base}/health") != 200:
            assert process.poll() is None, process.stdout.read()
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.5)
        login = server.read_login(folder / server.CREDENTIALS_FILE)
        user, password = login["MLFLOW_TRACKING_USERNAME"], login["MLFLOW_TRACKING_PASSWORD"]
        search = f"{base}/api/2.0/mlflow/experiments/search?max_results=5"
        assert status_of(search) == 401  # no login: refused
        assert status_of(search, (user, "not-the-password")) == 401
        assert status_of(f"{base}/", None) == 401  # the UI too
        assert status_of(search, (user, password)) == 200
        # The server caches a checked login (PBKDF2 per request costs a second on a busy node), not a wrong one.
        assert status_of(search, (user, password + "x")) == 401
        assert status_of(search, (user, password)) == 200
        # A command without the login stops before anything starts, in one paragraph (exit 2), and says where
        # a job's login is; with it, the same check passes.
        for key in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"):
            monkeypatch.delenv(key, raising=False)
        with pytest.raises(TrackingLoginRefused) as refused_probe:
            probe_server(base)
        assert "refused no login (MLFLOW_TRACKING_USERNAME/PASSWORD unset) (HTTP 401)" in str(refused_probe.value)
        assert "slurm/job-JOBID/mlflow-credentials" in str(refused_probe.value)
        assert refused_probe.value.exit_code == 2
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", user)
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "not-the-password")
        with pytest.raises(TrackingLoginRefused, match="refused the login in MLFLOW_TRACKING_USERNAME/PASSWORD"):
            probe_server(base)
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", password)
        probe_server(base)
        # The driver's way: MLflow's client given the login through the environment writes to the store.
        probe = ("import mlflow, sys\nclient = mlflow.MlflowClient(sys.argv[1])\n"
                 "print(client.create_experiment('auth_probe'))")
        env = {**os.environ, "MLFLOW_TRACKING_USERNAME": user, "MLFLOW_TRACKING_PASSWORD": password,
               "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}
        made = subprocess.run([sys.executable, "-c", probe, base], env=env, capture_output=True, text=True, timeout=120)
        assert made.returncode == 0, made.stderr
        env.pop("MLFLOW_TRACKING_PASSWORD")
        refused = subprocess.run([sys.executable, "-c", probe, base], env=env, capture_output=True, text=True,
                                 timeout=120)
        assert refused.returncode != 0 and "401" in refused.stderr, refused.stderr[-2000:]
        # The auth app's user database is made by the server, inside the job's private folder.
        assert (folder / server.AUTH_DATABASE_FILE).is_file() and mode(folder) == 0o700
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)

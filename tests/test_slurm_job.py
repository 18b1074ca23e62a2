"""`orchestrator slurm STUDY`: the job script it writes (`--dry-run`) for one and two GPU nodes, its sizing from
the study's largest trial and the refusals before anything is submitted; and the helpers the script runs on
the nodes (orchestrator/slurm/node.py). Fast: no SLURM here (tests/test_slurm.py runs the job on a real one)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.errors import UserInputError
from orchestrator.slurm import node

BASE = {"model": {"preset": "tiny", "pos_encoding": "kerple"}, "train": {"steps": 10, "batch_size": 8, "seq_len": 32},
        "eval": {"lengths": [32]}}


def write_study(folder: Path, resources: dict, name: str = "sized") -> Path:
    (folder / "studies").mkdir(exist_ok=True)
    wide = {"label": "Wide", "set": {"distributed.workers": 2, "model.processor": "dapev2"}}
    spec = {"name": name, "base": BASE, "variants": [{"label": "Kerple", "set": {}}, wide],
            "seeds": [0], "resources": resources}
    path = folder / "studies" / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def slurm(*args: str):
    return CliRunner().invoke(app, ["slurm", *args])


def sbatch_lines(script: str) -> list[str]:
    return [line.removeprefix("#SBATCH ") for line in script.splitlines() if line.startswith("#SBATCH ")]


def test_one_gpu_node_by_default_sized_for_the_largest_trial(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    study = write_study(tmp_path, {"cpus": 4, "gpus": 1})
    result = slurm(str(study), "--dry-run")
    assert result.exit_code == 0, result.output
    script = result.stdout  # the summary goes to stderr: `--dry-run > job.sbatch` writes the script alone
    # The largest trial (Wide: 2 workers x 1 GPU) on one node, with 4 CPUs per worker and one for the driver.
    assert sbatch_lines(script)[:5] == ["--job-name=orchestrator-sized", "--nodes=1", "--ntasks-per-node=1",
                                        "--cpus-per-task=9", "--gpus-per-node=2"]
    assert f"--output={tmp_path}/slurm/%x-%j.out" in sbatch_lines(script)
    assert {"--signal=B:USR1@120", "--dependency=singleton", "--open-mode=append"} <= set(sbatch_lines(script))
    unasked = ("--partition", "--account", "--time", "--requeue")
    assert not any(line.startswith(unasked) for line in sbatch_lines(script))
    # The default store is SQLite: the job serves it with an MLflow server on the first node, behind a login
    # made for the job (tests/test_slurm_auth.py), which the driver gets through its environment.
    assert re.search(rf'^python -m orchestrator.slurm.node mlflow-server "\$JOB_DIR" "\$HEAD_IP" "\$MLFLOW_PORT" \\\n'
                     rf'  sqlite:///{re.escape(str(tmp_path))}/mlruns/mlflow.db file://{re.escape(str(tmp_path))}'
                     rf'/mlruns/artifacts &', script, re.M), script
    assert f"JOB_DIR={tmp_path}/slurm/job-$SLURM_JOB_ID" in script
    assert script.index('. "$JOB_DIR/mlflow-credentials"') < script.index("python -m orchestrator run")
    assert "export MLFLOW_TRACKING_USERNAME MLFLOW_TRACKING_PASSWORD" in script
    assert re.search(rf"^python -m orchestrator run {re.escape(str(study))} --address \"\$RAY_ADDRESS_\" "
                     rf"--tracking-uri \"\$TRACKING_URI\" --reports-dir {tmp_path}/reports "
                     rf"--storage-dir {tmp_path}/.orchestrator &$", script, re.M), script
    assert "export RAY_AUTH_MODE=token" in script and "RAY_AUTH_TOKEN=$(python -c" in script
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    assert not (tmp_path / "slurm").exists()  # --dry-run writes nothing


def test_two_gpu_nodes_with_every_option(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    study = write_study(tmp_path, {"cpus": 2, "gpus": 1})
    result = slurm(str(study), "train.steps=20", "--dry-run", "--nodes", "2", "--gpus-per-node", "8",
                   "--partition", "gpu", "--account", "proj42", "--time", "1-00:00:00", "--sbatch=--qos=high",
                   "--sbatch=--constraint=a100", "--setup", "module load cuda/12.4", "--setup",
                   "source /shared/venv/bin/activate", "--tracking-uri", "http://mlflow.internal:5000",
                   "--join-timeout", "90", "--signal-grace", "300", "--requeue")
    assert result.exit_code == 0, result.output
    script = result.stdout
    assert sbatch_lines(script) == [
        "--job-name=orchestrator-sized", "--nodes=2", "--ntasks-per-node=1",
        "--cpus-per-task=5",  # the study's 3 workers at once (Kerple's 1, Wide's 2) over 2 nodes, plus the driver
        "--gpus-per-node=8", "--partition=gpu", "--account=proj42", "--time=1-00:00:00",
        f"--output={tmp_path}/slurm/%x-%j.out", "--open-mode=append", "--signal=B:USR1@300",
        "--dependency=singleton", "--requeue", "--qos=high", "--constraint=a100"]
    setup = script.index("module load cuda/12.4")
    assert setup < script.index("source /shared/venv/bin/activate") < script.index("RAY_AUTH_TOKEN=")
    # The other node's Ray worker starts through srun, on every node but the first; the wait is bounded.
    srun = " ".join(script[script.index("  srun "):script.index("WORKERS_PID=$!")].split())
    assert srun == ("srun --nodes=$((SLURM_JOB_NUM_NODES - 1)) --ntasks=$((SLURM_JOB_NUM_NODES - 1)) "
                    "--ntasks-per-node=1 \\ --cpus-per-task=5 --gpus-per-node=8 --relative=1 --kill-on-bad-exit=0 "
                    "--job-name=ray-workers "
                    '\\ python -m orchestrator.slurm.node ray-start worker "$RAY_ADDRESS_" "$RAY_TMP" &'), srun
    assert 'node wait-nodes "$RAY_ADDRESS_" "$SLURM_JOB_NUM_NODES" 90 || finish 1' in script
    # A tracking server is used as given: no server of the job's own.
    assert "mlflow-server" not in script and "TRACKING_URI=http://mlflow.internal:5000" in script
    assert "mlflow-credentials" not in script
    assert f"python -m orchestrator run {study} train.steps=20 --address" in script
    assert '[ "$STOP" = timeout ] && [ "$CODE" != 0 ] && REQUEUE=1' in script
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_writing_the_script_without_submitting(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    study = write_study(tmp_path, {"cpus": 1})
    result = slurm(str(study), "--nodes", "2")
    assert result.exit_code == 0, result.output
    script = tmp_path / "slurm" / "sized.sbatch"
    assert f"Submit it with: sbatch {script}" in " ".join(result.output.split())
    lines = sbatch_lines(script.read_text())
    # A CPU study: its 3 trial workers at once (Kerple 1, Wide 2) over 2 nodes, plus the driver.
    assert "--cpus-per-task=3" in lines and not any(line.startswith("--gpus") for line in lines)


def test_a_job_too_small_for_the_largest_trial_is_refused_with_the_numbers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    study = write_study(tmp_path, {"cpus": 1, "gpus": 1, "workers": 8, "parallelism": "fsdp"})
    result = slurm(str(study), "--nodes", "2", "--gpus-per-node", "2", "--submit")
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert ("the largest trial (Kerple · s0) needs 8 worker(s) x 1 GPU = 8 GPU(s) at once, but the job asks for "
            "2 node(s) x 2 GPU(s) = 4: ask for --gpus-per-node 4 (or more --nodes)") in text
    assert "Nothing was submitted" in text
    assert not (tmp_path / "slurm").exists()
    # A worker needs its GPUs on one node, and its CPUs.
    fractional = write_study(tmp_path, {"cpus": 16, "gpus": 2}, name="per_worker")
    result = slurm(str(fractional), "--nodes", "4", "--gpus-per-node", "1", "--cpus-per-node", "8", "--dry-run")
    text = " ".join(result.output.split())
    assert result.exit_code == 2
    assert "each worker needs 2 GPU(s) on one node, but a node of the job has 1" in text
    assert "each worker needs 16 CPU(s) on one node (resources.cpus), but a node of the job has 8" in text


def test_submitting_without_sbatch_says_so_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    study = write_study(tmp_path, {"cpus": 1})
    result = slurm(str(study), "--submit")
    assert result.exit_code == 2
    text = " ".join(result.output.split())
    assert "`sbatch` is not on the PATH" in text and "Nothing was submitted" in text
    assert not (tmp_path / "slurm" / "sized.sbatch").exists()


def test_node_helpers_read_what_slurm_granted():
    shown = "NodeName=gpu07 Arch=x86_64\n   NodeAddr=10.1.0.7 NodeHostName=gpu07 Version=22.05"
    assert node.node_addr(shown) == "10.1.0.7"
    assert node.granted_gpus({"CUDA_VISIBLE_DEVICES": "0,1,3"}) == 3
    assert node.granted_gpus({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}) == node.granted_gpus({}) == 0
    assert node.granted_cpus({"SLURM_CPUS_ON_NODE": "12"}) == 12
    argv = node.ray_start_argv("worker", "10.1.0.7:6379", "/tmp/r-1-gpu08", "10.1.0.8",
                               {"SLURM_CPUS_ON_NODE": "16", "CUDA_VISIBLE_DEVICES": "0,1"})
    assert argv == ["ray", "start", "--block", "--node-ip-address", "10.1.0.8", "--num-cpus", "16", "--num-gpus", "2",
                    "--temp-dir", "/tmp/r-1-gpu08", "--disable-usage-stats", "--address", "10.1.0.7:6379"]
    assert "--head" in node.ray_start_argv("head", "6379", "/tmp/r", "10.1.0.7", {})


@pytest.mark.slow
def test_the_wait_for_nodes_is_bounded_and_names_who_joined(local_ray):
    said: list[str] = []
    alive = lambda: [n["NodeManagerAddress"] for n in local_ray.nodes() if n["Alive"]]  # noqa: E731
    assert node.wait_for(alive, 2, timeout=0.5, poll=0.1, say=said.append, bound=300) is False
    assert re.fullmatch(r"Only 1 of 2 node\(s\) joined Ray within 300s \(--join-timeout\): [\d.]+\. The job stops "
                        r"without running the study: .*", said[-1]), said
    assert node.wait_for(alive, 1, timeout=0.5, say=said.append) is True


def test_stopping_a_ray_node_reaches_processes_in_groups_of_their_own():
    # Ray's workers make process groups of their own (ray::IDLE): the node's session holds them all.
    leader = subprocess.Popen(["bash", "-c", "sleep 300 & (set -m; sleep 301 & wait) & wait"], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(node.session_members(leader.pid)) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        members = node.session_members(leader.pid)
        groups = {os.getpgid(pid) for pid in members}
        assert len(members) == 4 and len(groups) == 2, (members, groups)
        node._signal_session(leader.pid, signal.SIGKILL)
        leader.wait(10)
        deadline = time.monotonic() + 10
        while node.session_members(leader.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert node.session_members(leader.pid) == []
    finally:
        node._signal_session(leader.pid, signal.SIGKILL)


def test_writing_a_job_and_the_nodes_helpers_load_neither_torch_ray_nor_mlflow():
    # The helpers run on every node at the job's start, and `orchestrator slurm` on a login node.
    probe = ("import sys\nimport orchestrator.slurm.node, orchestrator.slurm.script, orchestrator.slurm.job, "
             "orchestrator.slurm.submit, orchestrator.slurm.server\n"
             "print(sorted(m for m in ('torch', 'ray', 'mlflow') if m in sys.modules))")
    result = subprocess.run([os.sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip().splitlines()[-1] == "[]"


def _claimed_study(folder, name: str, **extra):
    """A study with a baseline and one claim (seeds can decide it); `extra`: more top-level fields. Returns its
    path and its spec."""
    study = write_study(folder, {"cpus": 1}, name)
    spec = yaml.safe_load(study.read_text())
    spec["variants"][0]["baseline"] = True
    spec["expect"] = [{"id": "wide_below", "kind": "compare", "source": "a test", "text": "Wide below Kerple",
                       "variant": "Wide", "direction": "below", "metric": "ppl", "at": ["1x"]}]
    spec.update(extra)
    study.write_text(yaml.safe_dump(spec, sort_keys=False))
    return study, spec


def test_decide_runs_the_sequence_in_the_job_sized_for_its_first_look_or_is_refused(tmp_path, monkeypatch):
    # `orchestrator slurm --decide`: the job's `orchestrator run` adds seeds until the claims are decided; the
    # summary sizes the first look (every row at min_seeds) and says how far later looks may go.
    monkeypatch.chdir(tmp_path)
    study, spec = _claimed_study(tmp_path, "deciding", decide={"min_seeds": 3, "max_seeds": 7, "batch": 2})
    result = slurm(str(study), "--dry-run", "--decide")
    assert result.exit_code == 0, result.output
    run_line = next(line for line in result.stdout.splitlines() if line.startswith("python -m orchestrator run"))
    assert run_line.endswith(" --decide &"), run_line
    said = " ".join(result.stderr.split())
    assert "Study deciding: 6 trial(s) to run" in said  # 2 rows x min_seeds 3, not the study's one seed
    assert "every row at min_seeds 3" in said and "up to max_seeds 7 (14 trials at most" in said
    # the same range as `orchestrator plan` (no store yet: the stated default effect of 2 seed SDs)
    assert "Its trials and device-hours: first look 6 trials" in said and "ceiling 14 trials" in said
    # Without the flag the study's decide: section still decides (run reads it), and the job is sized alike.
    plain = slurm(str(study), "--dry-run")
    assert "--decide" not in plain.stdout and "Study deciding: 6 trial(s) to run" in " ".join(plain.stderr.split())
    # A study whose claims seeds cannot decide is refused before anything is written.
    del spec["expect"], spec["decide"]
    study.write_text(yaml.safe_dump(spec, sort_keys=False))
    refused = slurm(str(study), "--decide", "--script", str(tmp_path / "job.sbatch"))
    # main() says the error in one paragraph and exits with its code (2: invalid input).
    assert isinstance(refused.exception, UserInputError) and refused.exception.exit_code == 2, refused.output
    assert "cannot add seeds until its claims are decided: decide: the study has no claims" in str(refused.exception)
    assert not (tmp_path / "job.sbatch").exists()


def test_the_run_flags_reach_the_jobs_run_and_contradictions_are_refused(tmp_path, monkeypatch):
    # --new-sequence, --retrain-stale and --keep-stale mean in the job what they mean to `orchestrator run`.
    monkeypatch.chdir(tmp_path)
    study, _ = _claimed_study(tmp_path, "flags")
    result = slurm(str(study), "--dry-run", "--decide", "--new-sequence", "--keep-stale")
    assert result.exit_code == 0, result.output
    run_line = next(line for line in result.stdout.splitlines() if line.startswith("python -m orchestrator run"))
    assert run_line.endswith(" --decide --new-sequence --keep-stale &"), run_line
    plain = slurm(str(study), "--dry-run", "--retrain-stale")
    assert plain.exit_code == 0, plain.output
    assert next(line for line in plain.stdout.splitlines()
                if line.startswith("python -m orchestrator run")).endswith(" --retrain-stale &")
    for flags, said in ((("--retrain-stale", "--keep-stale"), "either trained again or kept, not both"),
                        (("--new-sequence",), "give --decide too")):
        refused = slurm(str(study), *flags, "--script", str(tmp_path / "job.sbatch"))
        assert refused.exit_code == 2 and said in " ".join(refused.output.split()), refused.output
        assert not (tmp_path / "job.sbatch").exists()

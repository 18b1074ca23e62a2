"""`orchestrator slurm` sizes the job before anything is submitted (orchestrator/slurm/sizing.py): a summary on
stderr (trials, each one's CPUs and GPUs, trials at once, the plan's estimated time against --time), warnings
where the time limit will cut the study or GPUs would sit idle, and CPUs per node for the study's concurrency
by default. Fast: no SLURM, no store."""

from __future__ import annotations

import re

import pytest
from test_slurm_job import sbatch_lines, write_study
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.slurm import sizing
from orchestrator.slurm.job import JobRequest, largest_trial
from orchestrator.study.load import load_study
from orchestrator.trial.trials import expand

FIVE = {"label": "Five", "set": {}}


def five_trials(folder, resources: dict, name: str = "five"):
    """A study of 5 one-worker trials (seeds 0-4 of one variant)."""
    import yaml

    path = write_study(folder, resources, name)
    spec = yaml.safe_load(path.read_text())
    spec["variants"], spec["seeds"] = [FIVE], [0, 1, 2, 3, 4]
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def slurm(*args: str):
    return CliRunner().invoke(app, ["slurm", *args])


def said(result) -> str:
    return " ".join(result.stderr.split())


def test_a_cpu_study_gets_cpus_for_its_trials_at_once_and_a_summary_first(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    study = five_trials(tmp_path, {"cpus": 2})
    result = slurm(str(study), "--dry-run", "train.steps=20000", "--time", "2-00:00:00")
    assert result.exit_code == 0, result.output
    # 5 trials of 2 CPUs side by side, plus one for the driver: not one at a time on 3 CPUs.
    assert "--cpus-per-task=11" in sbatch_lines(result.stdout)
    text = said(result)
    assert "Study five: 5 trial(s) to run; each 1 worker(s) x (2 CPU, no GPU)" in text
    assert "Job: 1 node(s) x (11 CPUs, no GPU): 5 trial(s) at once, 5 trial worker(s) per node" in text
    assert "--time 2-00:00:00 (48.0h)" in text and "Warning" not in text
    estimated = re.search(r"Estimated time: (\S+) with 5 at once \(one at a time: (\S+);", text)
    assert estimated, text
    # resources.max_concurrent caps the trials at once, and so the default CPUs.
    capped = slurm(str(study), "--dry-run", "resources.max_concurrent=2")
    assert "--cpus-per-task=5" in sbatch_lines(capped.stdout)
    assert "2 trial(s) at once" in said(capped) and "(resources.max_concurrent: 2)" in said(capped)
    # One at a time: the estimate is the serial one.
    serial = slurm(str(study), "--dry-run", "train.steps=20000", "resources.max_concurrent=1")
    one = re.search(r"Estimated time: (\S+) with 1 at once \(one at a time: (\S+);", said(serial))
    assert one and one.group(1) == one.group(2) == estimated.group(2) != estimated.group(1)
    # Given CPUs are kept, and say how many trials they run at once.
    given = slurm(str(study), "--dry-run", "--cpus-per-node", "4")
    assert "--cpus-per-task=4" in sbatch_lines(given.stdout) and "2 trial(s) at once" in said(given)


def test_a_time_limit_that_cuts_the_study_is_said_before_submitting(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    study = five_trials(tmp_path, {"cpus": 1, "max_concurrent": 1}, name="long")
    result = slurm(str(study), "--dry-run", "train.steps=50000", "--time", "10")
    assert result.exit_code == 0, result.output
    text = said(result)
    assert re.search(r"Warning: the time limit will cut the study: about \S+ of trials against 8min before the job "
                     r"is asked to stop \(--time less --signal-grace\); it stops cleanly and resumes when the script "
                     r"is submitted again \(by itself with --requeue\)", text), text
    # An unreadable --time is refused before anything is written.
    bad = slurm(str(study), "--time", "ten minutes")
    assert bad.exit_code == 2
    assert "--time 'ten minutes' is not a SLURM time limit" in " ".join(bad.output.split())
    assert not (tmp_path / "slurm").exists()


def test_gpus_the_trials_do_not_use_are_warned_about(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cpu = five_trials(tmp_path, {"cpus": 1})
    result = slurm(str(cpu), "--dry-run", "--gpus-per-node", "4")
    assert result.exit_code == 0
    assert ("Warning: the job asks for 4 GPU(s) but the study's trials use none (resources.gpus is 0): they would "
            "sit idle") in said(result)
    gpu = five_trials(tmp_path, {"cpus": 1, "gpus": 1, "max_concurrent": 2}, name="two_at_once")
    result = slurm(str(gpu), "--dry-run", "--gpus-per-node", "8")
    assert result.exit_code == 0
    assert "Warning: at most 2 of the job's 8 GPU(s) are used at once (2 trial(s) of up to 1 worker(s) x 1 GPU, " \
           "resources.max_concurrent)" in said(result)
    # GPUs a study fills: no warning; the trials at once follow the GPUs.
    full = slurm(str(gpu), "--dry-run", "--gpus-per-node", "2")
    assert "Warning" not in said(full) and "2 trial(s) at once" in said(full)


def test_finished_trials_leave_the_estimate_and_the_schedule_is_longest_first(tmp_path):
    study = load_study(five_trials(tmp_path, {"cpus": 1}))
    everything = sizing.study_work(study)
    assert len(everything.trials) == 5 and everything.finished == 0 and everything.workers_at_once == 5
    done = {trial.trial_id for trial in expand(study)[:2]}
    rest = sizing.study_work(study, None, done)
    assert len(rest.trials) == 3 and rest.finished == 2
    request = JobRequest().complete(largest_trial(study), rest.workers_at_once)
    assert request.cpus_per_node == 4 and sizing.trials_at_once(request, rest) == 3
    # Longest first onto the slots: 7 / 5 / 4 / 3 / 2 / 1 on two slots end at 11 (7+3+1 and 5+4+2).
    assert sizing.wall_seconds([1, 2, 3, 4, 5, 7], 2) == 11
    assert sizing.wall_seconds([4.0, 4.0], 1) == 8 and sizing.wall_seconds([], 3) == 0


@pytest.mark.parametrize("text, seconds", [("30", 1800), ("30:15", 1815), ("2:00:00", 7200), ("1-12", 129600),
                                           ("1-00:30", 88200), ("2-01:02:03", 176523), (None, None),
                                           ("UNLIMITED", None)])
def test_slurm_time_limits_are_read_in_every_format_sbatch_takes(text, seconds):
    assert sizing.time_limit_seconds(text) == seconds


def sixteen_gpu_trials(folder):
    """16 one-GPU trials of 8 CPUs each: two 8-GPU nodes run 8 each, 8 x 8 + 1 for the driver = 65 CPUs wanted."""
    import yaml

    path = five_trials(folder, {"cpus": 8, "gpus": 1}, name="sixteen")
    spec = yaml.safe_load(path.read_text())
    spec["seeds"] = list(range(16))
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_cpus_per_node_never_exceed_the_nodes_cores(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    study = sixteen_gpu_trials(tmp_path)
    # No sinfo here: a node's cores are the documented default, 64, and the job asks no more (65 never schedules).
    assumed = slurm(str(study), "--dry-run", "--nodes", "2", "--gpus-per-node", "8")
    assert assumed.exit_code == 0, assumed.output
    assert "--cpus-per-task=64" in sbatch_lines(assumed.stdout)
    text = said(assumed)
    assert "Job: 2 node(s) x (64 CPUs, 8 GPU(s)): 16 trial(s) at once, 8 trial worker(s) per node" in text
    assert "64 cores, assumed (sinfo did not answer; give the nodes' cores with --node-cores, default 64)" in text
    assert "not the 65 its trial workers and the driver would take" in text
    # The nodes' cores given: the default CPUs fit them, and the trials at once follow.
    given = slurm(str(study), "--dry-run", "--nodes", "2", "--gpus-per-node", "8", "--node-cores", "48")
    assert given.exit_code == 0, given.output
    assert "--cpus-per-task=48" in sbatch_lines(given.stdout)
    assert "(48 CPUs, 8 GPU(s)): 12 trial(s) at once, 6 trial worker(s) per node" in said(given)
    # Asking a node for more CPUs than it has is refused before anything is written...
    refused = slurm(str(study), "--dry-run", "--nodes", "2", "--gpus-per-node", "8", "--node-cores", "64",
                    "--cpus-per-node", "80")
    assert refused.exit_code == 2 and "asks for 80 CPUs per node, but its nodes have 64 cores (--node-cores)" in \
        " ".join(refused.output.split())
    # ...and warned about where the cores are only assumed.
    warned = slurm(str(study), "--dry-run", "--nodes", "2", "--gpus-per-node", "8", "--cpus-per-node", "80")
    assert warned.exit_code == 0 and "more than the 64 cores assumed of a node" in said(warned)


def test_a_nodes_cores_come_from_sinfo_where_it_answers():
    import subprocess

    from orchestrator.slurm.cores import DEFAULT_NODE_CORES, NodeCores, node_cores, sinfo_cores

    assert sinfo_cores("  64\n128+\n") == 64 and sinfo_cores("") is None
    asked = []

    def sinfo(command, **_):  # SLURM's answer for a partition of 32- and 96-core nodes
        asked.append(command)
        return subprocess.CompletedProcess(command, 0, stdout="32\n96\n", stderr="")

    assert node_cores(None, "gpu", sinfo) == NodeCores(32, "sinfo --partition gpu")
    assert asked == [["sinfo", "--noheader", "--format=%c", "--partition", "gpu"]]
    assert node_cores(48, "gpu", sinfo) == NodeCores(48, "--node-cores")  # the flag wins

    def unreachable(command, **_):
        raise subprocess.TimeoutExpired(command, 10)

    assert node_cores(None, None, unreachable) == NodeCores(DEFAULT_NODE_CORES, "default")

"""Paper-scale sizing before the corpus exists: on a fresh clone (no data/paper/tokens.bin), `orchestrator plan
STUDY --profile paper` and `orchestrator slurm ... --profile paper --dry-run` size the study from the profile's
declared model (vocabulary, lengths) and say in one line that the data is not prepared and how to prepare it;
`validate` still reports it, `slurm` without --dry-run and `run` still refuse (exit 2). Fast: nothing trains."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app

STUDY = Path(__file__).resolve().parents[1] / "studies" / "kernel_size.yaml"
PREPARE = "prepare it with `orchestrator data prepare CORPUS --output data/paper`"


@pytest.fixture
def fresh_clone(tmp_path, monkeypatch):
    """The study file alone in a folder without data/: a clone before `data prepare`."""
    (tmp_path / "studies").mkdir()
    shutil.copy(STUDY, tmp_path / "studies" / STUDY.name)
    monkeypatch.chdir(tmp_path)
    assert not (tmp_path / "data").exists()
    return tmp_path / "studies" / STUDY.name


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def _note(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if "The data is not prepared" in line]


def test_plan_sizes_the_paper_profile_without_the_data_and_says_so_in_one_line(fresh_clone):
    result = invoke("plan", str(fresh_clone), "--profile", "paper")
    assert result.exit_code == 0, result.output
    (note,) = _note(result)
    assert "data.path: no token file at data/paper/tokens.bin" in note and PREPARE in note
    # sized from the profile's declared model: 125M with its 50304-token vocabulary (untied embeddings)
    assert "162.32M" in result.stdout and "Estimated time" in result.stdout


def test_slurm_dry_run_sizes_the_job_without_the_data_and_writing_it_still_refuses(fresh_clone):
    dry = invoke("slurm", str(fresh_clone), "--profile", "paper", "--dry-run")
    assert dry.exit_code == 0, dry.output
    (note,) = _note(dry)
    assert PREPARE in note
    assert "#SBATCH --gpus-per-node=1" in dry.stdout and "Study kernel_size: 15 trial(s) to run" in dry.stderr
    written = invoke("slurm", str(fresh_clone), "--profile", "paper")
    assert written.exit_code == 2 and "no token file at data/paper/tokens.bin" in written.output
    assert not (fresh_clone.parent.parent / "slurm" / "kernel_size.sbatch").exists()


def test_validate_still_reports_the_missing_data_and_run_still_refuses(fresh_clone):
    validated = invoke("validate", str(fresh_clone), "--profile", "paper")
    assert validated.exit_code == 2 and "no token file at data/paper/tokens.bin" in validated.output
    ran = invoke("run", str(fresh_clone), "--profile", "paper")
    assert ran.exit_code == 2 and "no token file at data/paper/tokens.bin" in ran.output
    assert not _note(ran)  # refused, not noted


def test_the_default_profile_with_its_data_says_nothing(fresh_clone):
    result = invoke("plan", str(fresh_clone))  # the CPU default reads the standard library: nothing to prepare
    assert result.exit_code == 0, result.output
    assert not _note(result)

"""Malformed study files: each names the field, exits 2, and launches nothing (no MLflow store, no run)."""

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator import StudyError, expand, load_study
from orchestrator.cli import app

MALFORMED = sorted((Path(__file__).parent / "malformed").glob("*.yaml"))
STUDIES = sorted((Path(__file__).parents[1] / "studies").glob("*.yaml"))


def _expected_fragment(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name} must start with '# expect: <text the error names>'"
    return first.removeprefix("# expect: ")


def test_corpus_is_large_enough():
    assert len(MALFORMED) >= 30


@pytest.mark.parametrize("path", MALFORMED, ids=lambda p: p.stem)
def test_malformed_study_names_the_field_and_launches_nothing(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'store.db'}")
    result = CliRunner().invoke(app, ["run", str(path)])
    assert result.exit_code == 2, result.output
    assert _expected_fragment(path) in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "store.db").exists() and not (tmp_path / "mlruns").exists()


def test_every_problem_is_reported_at_once(tmp_path):
    study = tmp_path / "many.yaml"
    study.write_text("name: bad\nbase: {model: {kernel_size: 4, d_dape: -1}, train: {steps: 0}}\n")
    with pytest.raises(StudyError) as error:
        load_study(study)
    text = str(error.value)
    for field in ("base.model.kernel_size", "base.model.d_dape", "base.train.steps"):
        assert field in text


def test_real_process_exit_code_is_two(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(MALFORMED[0])], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "mlruns").exists()


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_shipped_studies_validate_and_plan_in_both_profiles(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    study = load_study(path)
    assert expand(study)
    assert "paper" in study.profiles, "every study has a `paper` profile at the papers' scale"
    paper = load_study(path, profile="paper")
    assert paper.resources.gpus >= 1
    for args in (["plan", str(path)], ["plan", str(path), "--profile", "paper"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        assert "to run" in result.output
    assert not (tmp_path / "mlruns").exists()


def test_kernel_size_study_expands_to_its_five_rows():
    study = load_study(Path(__file__).parents[1] / "studies" / "kernel_size.yaml")
    trials = expand(study)
    assert [t.label for t in trials] == ["Kerple", "DAPE-Kerple", "DAPE1x3-Kerple", "DAPE1x5-Kerple", "DAPE1x7-Kerple"]
    assert [(t.config["model"]["processor"], t.config["model"]["kernel_size"]) for t in trials][1:] == [
        ("dapev2", 1), ("dapev2", 3), ("dapev2", 5), ("dapev2", 7)]
    assert len({t.trial_id for t in trials}) == 5

"""A report belongs to its store (docs/protocol.md): the commands that read another store (`--tracking-uri`)
write its report beside that store, never over the project's own, and the report names the store it came from.
A tiny study run for real into its project's default store, then read from a copy of that store."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from cli_support import run_cli
from test_evaluate import BASE, VARIANTS


def test_where_the_reports_of_each_store_go(tmp_path, monkeypatch):
    from orchestrator.tracking.uri import reports_root

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    project = tmp_path / "p"
    (project / "studies").mkdir(parents=True)
    study = project / "studies" / "s.yaml"
    assert reports_root(f"sqlite:///{project / 'mlruns' / 'mlflow.db'}", study) == project / "reports"
    assert reports_root(f"sqlite:///{project}/studies/../mlruns/mlflow.db", study) == project / "reports"  # same file
    assert reports_root(f"sqlite:///{tmp_path / 'copy' / 'mlflow.db'}", study) == tmp_path / "copy" / "reports"
    assert reports_root(f"sqlite:///{tmp_path / 'copy' / 'mlflow.db'}", study, beside=False) == \
        project / "reports" / f"store-{str(tmp_path / 'copy' / 'mlflow.db').strip('/').replace('/', '_')}"
    assert reports_root("http://mlflow:5000/", study) == project / "reports" / "store-mlflow_5000"
    # A database beside the project's reports/ would share it: it gets a folder of its own there.
    assert reports_root(f"sqlite:///{project / 'other.db'}", study).parent == project / "reports"
    assert reports_root(f"sqlite:///{project / 'other.db'}", study) != project / "reports"
    # MLFLOW_TRACKING_URI names the project's store: its reports are the project's.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow:5000")
    assert reports_root("http://mlflow:5000", study) == project / "reports"


def _files(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_report_built_from_another_store_leaves_the_projects_report_unchanged(tmp_path, capsys, monkeypatch):
    project = tmp_path / "project"
    (project / "studies").mkdir(parents=True)
    spec = {"name": "owned", "base": BASE, "variants": VARIANTS, "resources": {"cpus": 1, "max_retries": 0}}
    study = project / "studies" / "owned.yaml"
    study.write_text(yaml.safe_dump(spec, sort_keys=False))
    monkeypatch.chdir(tmp_path)  # elsewhere: the project folder comes from the study file
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    code, output = run_cli(capsys, "run", study, "--local")
    assert code == 0, output
    own = project / "reports" / "owned"
    assert (own / "report.md").is_file(), output
    before = _files(own)

    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(project / "mlruns" / "mlflow.db", copy / "mlflow.db")
    shutil.copytree(project / "mlruns" / "artifacts", copy / "artifacts")  # a store is copied with its artifacts
    other = f"sqlite:///{copy / 'mlflow.db'}"
    # The copy gains a column the project's store does not have; then its report is built again.
    code, output = run_cli(capsys, "evaluate", study, "--tracking-uri", other, "--lengths", "128", "--local")
    assert code == 0, output
    code, output = run_cli(capsys, "report", study, "--tracking-uri", other)
    assert code == 0, output
    assert f"Report: {copy / 'reports' / 'owned' / 'report.html'}" in output

    assert _files(own) == before, "the project's report changed"
    theirs = (copy / "reports" / "owned" / "report.md").read_text()
    assert "L=128" in theirs and str(copy / "mlflow.db") in theirs  # the copy's report names the copy's store
    mine = (own / "report.md").read_text()
    assert "L=128" not in mine and str(project / "mlruns" / "mlflow.db") in mine


@pytest.mark.timeout(300)
def test_a_copied_projects_report_names_the_store_it_was_copied_to(tmp_path, capsys, monkeypatch):
    """Issue 53: `report` in a copied project printed the report's path but kept the report, whose inputs were
    unchanged, so it still named the original's store. Where the store is belongs to the report's inputs."""
    import synthetic_store

    from orchestrator import parse_study

    project = tmp_path / "project"
    (project / "studies").mkdir(parents=True)
    spec = {"name": "moved", "seeds": [0, 1],
            "base": {"model": {"preset": "tiny", "pos_encoding": "kerple"}, "data": {"max_files": 10},
                     "train": {"steps": 3, "batch_size": 4, "seq_len": 32},
                     "eval": {"lengths": [32, 64], "tail_tokens": 16, "n_windows": 2}},
            "variants": [{"label": "Kerple", "baseline": True, "set": {"model.processor": "none"}},
                         {"label": "DAPE", "set": {"model.processor": "dapev2"}}]}
    study = project / "studies" / "moved.yaml"
    study.write_text(yaml.safe_dump(spec, sort_keys=False))
    (project / "mlruns").mkdir()
    synthetic_store.write_store(parse_study(spec), f"sqlite:///{project / 'mlruns' / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)  # elsewhere: the project folder (and its store) comes from the study file
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    code, output = run_cli(capsys, "report", study)
    assert code == 0, output
    original = (project / "reports" / "moved" / "report.md").read_text()
    assert str(project / "mlruns" / "mlflow.db") in original
    code, output = run_cli(capsys, "report", study)  # nothing changed: kept as it is
    assert code == 0 and (project / "reports" / "moved" / "report.md").read_text() == original

    copy = tmp_path / "copied"
    shutil.copytree(project, copy)
    code, output = run_cli(capsys, "report", copy / "studies" / "moved.yaml")
    assert code == 0, output
    assert f"Report: {copy / 'reports' / 'moved' / 'report.html'}" in output
    for name in ("report.md", "report.html"):
        theirs = (copy / "reports" / "moved" / name).read_text()
        assert str(copy / "mlruns" / "mlflow.db") in theirs and str(project / "mlruns") not in theirs, name
    assert (project / "reports" / "moved" / "report.md").read_text() == original

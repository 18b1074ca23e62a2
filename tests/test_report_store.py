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

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow, pytest.mark.timeout(300)]


def _files(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


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

"""A finished study run again with nothing changed (issue 45): `orchestrator run` trains nothing, writes nothing
and answers in about the time Python takes to load pandas: Ray is not started, MLflow not loaded (the store
is read directly, the parent run left FINISHED as it is: tracking/store.py's `idle` start), the report kept
with the summary written beside it (reporting/fingerprint.py), so no figure is drawn and matplotlib not
loaded. The study's trials are a synthetic store's (tests/synthetic_store.py): no training."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import synthetic_store
import yaml
from cli_support import run_cli

from orchestrator import parse_study
from orchestrator.tracking.readers import SQLiteReader
from orchestrator.tracking.store import ROLE_TAG

SPEC = {"name": "rerun", "description": "A finished study run again.",
        "base": {"model": {"preset": "tiny", "pos_encoding": "kerple"},
                 "train": {"steps": 100, "batch_size": 8, "seq_len": 64}, "eval": {"lengths": [64, 128]}},
        "axes": {"train.lr": [0.001, 0.002]},
        "variants": [{"label": "Kerple", "baseline": True, "set": {"model.processor": "none"}},
                     {"label": "DAPE", "set": {"model.processor": "dapev2", "model.kernel_size": 3}}],
        "resources": {"cpus": 1}}
WATCHED = ("mlflow", "ray", "torch", "matplotlib")


def _state(root: Path) -> tuple[str, dict[str, int], tuple]:
    """The store's bytes, the report's files and their times, the parent run's status, end and tags."""
    reader = SQLiteReader(root / "mlflow.db")
    experiment = reader.experiment(SPEC["name"])
    assert experiment is not None
    parent = reader.runs(experiment[0], ROLE_TAG, "study")[0]
    report = root / "reports" / SPEC["name"]
    return (hashlib.sha256((root / "mlflow.db").read_bytes()).hexdigest(),
            {path.name: path.stat().st_mtime_ns for path in report.rglob("*") if path.is_file()},
            (parent.info.status, parent.info.end_time, parent.data.tags))


@pytest.mark.slow
def test_a_finished_study_run_again_loads_neither_ray_nor_mlflow_and_writes_nothing(tmp_path, capsys):
    synthetic_store.write_store(parse_study(SPEC), f"sqlite:///{tmp_path / 'mlflow.db'}")
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(SPEC))
    args = ["run", tmp_path / "study.yaml", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
            "--reports-dir", tmp_path / "reports", "--storage-dir", tmp_path / "state"]
    code, first = run_cli(capsys, *args)  # the parent run takes this code's tags, the report is written
    assert code == 0 and "4 trial(s) reused, 0 run" in first, first
    before = _state(tmp_path)
    assert before[2][0] == "FINISHED" and (tmp_path / "reports" / "rerun" / "plots").is_dir()

    probe = ("import runpy, sys\n"
             f"sys.argv = ['orchestrator', *{[str(arg) for arg in args]!r}]\n"
             "try:\n    runpy.run_module('orchestrator', run_name='__main__')\n"
             f"finally:\n    print('LOADED', sorted(m for m in {WATCHED!r} if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 trial(s) reused, 0 run, 0 failed" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "LOADED []", done.stdout
    summary = first.split("\nReport: ")[0].split("not rerun\n", 1)[1].strip()  # the headline table and its notes
    assert summary and summary in done.stdout
    assert _state(tmp_path) == before  # the store's bytes, the report's files, the parent run: as they were

    report = json.loads((tmp_path / "reports" / "rerun" / "report.fingerprint.json").read_text())
    assert report["summary"] in first

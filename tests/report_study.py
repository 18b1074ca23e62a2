"""The tiny real studies behind the report, UI and tracking tests, trained through Ray Tune into SQLite MLflow
stores once per test session:
- `build`: two rows (DAPE V2 over Kerple with kernels 1 and 3, the first the baseline) and three seeds
  (about a minute on two busy cores);
- `build_grid`: a grid study, no processor (the baseline) and DAPE, each at two position encodings, one
  seed: every row is compared with the baseline of its own grid point (half a minute)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import yaml

from orchestrator import Study, parse_study

STUDY = {
    "name": "tiny_report",
    "description": "Report test: DAPE V2 with a 1x3 kernel against DAPE (1x1), both over Kerple.",
    "base": {
        "model": {"preset": "tiny", "pos_encoding": "kerple", "d_dape": 8, "processor": "dapev2"},
        "data": {"max_files": 300},
        "train": {"steps": 30, "batch_size": 8, "seq_len": 32, "log_every": 10},
        "eval": {"lengths": [32, 64, 128], "tail_tokens": 16, "n_windows": 8},
    },
    "variants": [
        {"label": "DAPE-Kerple", "baseline": True, "set": {"model.kernel_size": 1}},
        {"label": "DAPE1x3-Kerple", "set": {"model.kernel_size": 3}},
    ],
    "seeds": [0, 1, 2],
    "resources": {"cpus": 1, "max_retries": 0},
}
GRID = {
    "name": "tiny_grid",
    "description": "Grid test: no processor and DAPE, each over NoPE and Kerple.",
    "base": {
        "model": {"preset": "tiny", "d_dape": 8},
        "data": {"max_files": 300},
        "train": {"steps": 20, "batch_size": 8, "seq_len": 32, "log_every": 10},
        "eval": {"lengths": [32, 64, 128], "tail_tokens": 16, "n_windows": 8},
    },
    "axes": {"model.pos_encoding": ["nope", "kerple"]},
    "variants": [
        {"label": "plain", "baseline": True, "set": {"model.processor": "none"}},
        {"label": "DAPE", "set": {"model.processor": "dape"}},
    ],
    "seeds": [0],
    "resources": {"cpus": 1, "max_retries": 0},
}
BASELINE = "DAPE-Kerple"
LABELS = ["DAPE-Kerple", "DAPE1x3-Kerple"]
LENGTHS = [32, 64, 128]


@dataclass(frozen=True)
class BuiltStudy:
    study: Study
    study_file: Path
    tracking_uri: str
    reports_dir: Path

    @property
    def report_dir(self) -> Path:
        return self.reports_dir / self.study.name


def _run(spec: dict, root: Path) -> BuiltStudy:
    """Run a study for real and write its report, as `orchestrator run` does (orchestrator/run.py)."""
    from orchestrator.run import run_and_report
    from orchestrator.run_context import RunContext

    root.mkdir(parents=True, exist_ok=True)
    study_file = root / f"{spec['name']}.yaml"
    study_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    study = parse_study(spec)
    uri = f"sqlite:///{root / 'mlflow.db'}"
    context = RunContext.create(study, uri, storage_dir=root / "state", study_path=study_file)
    outcome = run_and_report(context, root / "reports")
    assert outcome.ok, outcome.failed
    return BuiltStudy(study, study_file, uri, root / "reports")


@functools.cache
def build(root: Path) -> BuiltStudy:
    return _run(STUDY, root)


@functools.cache
def build_grid(root: Path) -> BuiltStudy:
    return _run(GRID, root)

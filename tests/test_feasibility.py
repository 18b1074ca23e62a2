"""What cannot finish is refused before launch (orchestrator/planning/feasibility.py): `validate`, `plan` and `run`
share one check; a trial whose estimated training memory or evaluation memory exceeds the worker's, or whose
estimated training time exceeds resources.max_hours, is a validation error with the numbers, exit 2, nothing
launched and nothing written to the store."""

from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import app

BASE = {"model": {"preset": "tiny", "pos_encoding": "alibi", "processor": "none"},
        "data": {"max_files": 300}, "train": {"steps": 20, "batch_size": 8, "seq_len": 32, "log_every": 10},
        "eval": {"lengths": [32], "tail_tokens": 16, "n_windows": 4}}

ABSURD = [  # (the override, what the refusal says)
    ("train.steps=1000000000000", ["training takes about", "train.steps=1,000,000,000,000",
                                   "more than resources.max_hours=720"]),
    ("train.batch_size=1000000000", ["training needs about", "GiB per worker", "train.batch_size=1000000000",
                                     "more than 2x this machine's memory"]),
    ("eval.lengths=[32,1000000000]", ["evaluating L=1000000000 needs about", "more than this machine's memory"]),
]


def _study(tmp_path, overrides: dict | None = None):
    base = {**BASE, **(overrides or {})}
    path = tmp_path / "absurd.yaml"
    path.write_text(yaml.safe_dump({"name": "absurd", "base": base}))
    return path


@pytest.mark.parametrize("override,words", ABSURD, ids=[o.split("=")[0] for o, _ in ABSURD])
def test_absurd_sizes_are_refused_by_validate_plan_and_run_before_anything_launches(override, words, tmp_path,
                                                                                       monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "store" / "mlflow.db"
    path = _study(tmp_path)
    key, value = override.split("=", 1)
    section, field = key.split(".")
    (tmp_path / "as_file").mkdir()  # validate takes no overrides: the absurd value written in the file
    file_study = _study(tmp_path / "as_file", {section: {**BASE[section], field: yaml.safe_load(value)}})
    for argv in (["validate", str(file_study)], ["plan", str(path), override],
                 ["run", str(path), override, "--local", "--tracking-uri", f"sqlite:///{store}"]):
        result = CliRunner().invoke(app, argv)
        text = " ".join(result.output.split())
        assert result.exit_code == 2, (argv[0], result.output)
        assert "Invalid study" in text and all(word in text for word in words), (argv[0], text)
        assert "Traceback" not in result.output
    assert not store.exists() and not store.parent.exists()  # nothing written: no store, no run
    assert not (tmp_path / "mlruns").exists()


def test_a_sound_study_passes_and_max_hours_is_overridable(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _study(tmp_path)
    assert CliRunner().invoke(app, ["validate", str(path)]).exit_code == 0
    result = CliRunner().invoke(app, ["plan", str(path), "train.steps=1000000000000"])
    assert result.exit_code == 2, result.output
    result = CliRunner().invoke(app, ["plan", str(path), "train.steps=1000000000000",
                                      "resources.max_hours=100000000"])
    assert result.exit_code == 0, result.output  # meant: the bound is the study's to raise

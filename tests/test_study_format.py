"""The study format's shapes: grid, zip, exclude, one-at-a-time, variants x seeds, profiles, overrides."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator import StudyError, expand, parse_study
from orchestrator.cli import app

BASE = {"model": {"preset": "tiny", "processor": "dapev2"}, "train": {"steps": 5, "seq_len": 32},
        "eval": {"lengths": [32, 64], "tail_tokens": 16}}


def _rows(spec):
    return [(t.label, t.seed) for t in expand(parse_study({"name": "s", "base": BASE, **spec}))]


def _swept(spec, *keys):
    study = parse_study({"name": "s", "base": BASE, **spec})
    return [tuple(t.config[k.split(".")[0]][k.split(".")[1]] for k in keys) for t in expand(study)]


def test_grid_is_cartesian():
    spec = {"axes": {"model.kernel_size": [1, 3], "model.d_dape": [8, 16]}}
    assert _swept(spec, "model.kernel_size", "model.d_dape") == [(1, 8), (1, 16), (3, 8), (3, 16)]


def test_zip_varies_together_and_exclude_drops():
    spec = {"zip": {"model.kernel_size": [1, 3, 5], "model.d_dape": [64, 21, 13]},
            "exclude": [{"model.kernel_size": 5}]}
    assert _swept(spec, "model.kernel_size", "model.d_dape") == [(1, 64), (3, 21)]


def test_one_at_a_time_varies_each_axis_alone_from_the_first_values():
    spec = {"axes": {"model.kernel_size": [3, 1, 5], "model.d_dape": [32, 8]}, "one_at_a_time": True}
    assert _swept(spec, "model.kernel_size", "model.d_dape") == [(3, 32), (1, 32), (5, 32), (3, 8)]
    study = parse_study({"name": "s", "base": BASE, **spec})
    assert study.baseline_label == study.cells()[0].label


def test_variants_cross_seeds_with_distinct_identities():
    spec = {"variants": [{"label": "A", "baseline": True}, {"label": "B", "set": {"model.kernel_size": 5}}],
            "seeds": [0, 1, 2]}
    assert _rows(spec) == [("A", 0), ("A", 1), ("A", 2), ("B", 0), ("B", 1), ("B", 2)]
    trials = expand(parse_study({"name": "s", "base": BASE, **spec}))
    assert len({t.trial_id for t in trials}) == 6
    assert [t.config["train"]["seed"] for t in trials] == [0, 1, 2, 0, 1, 2]


def test_identity_ignores_order_and_labels_but_not_values():
    a = expand(parse_study({"name": "s", "base": BASE, "variants": [{"label": "X", "set": {"model.kernel_size": 3}}]}))
    b = expand(parse_study({"name": "s", "base": BASE, "variants": [{"label": "Y", "set": {"model.kernel_size": 3}}]}))
    c = expand(parse_study({"name": "s", "base": BASE, "variants": [{"label": "X", "set": {"model.kernel_size": 5}}]}))
    assert a[0].trial_id == b[0].trial_id != c[0].trial_id


def test_profile_and_command_line_overrides(tmp_path):
    spec = {"name": "s", "base": BASE, "profiles": {"paper": {"base.model.preset": "125M", "resources.gpus": 1,
                                                              "seeds": [0, 1, 2]}}}
    study = parse_study(spec, profile="paper", overrides={"train.steps": 7})
    trials = expand(study)
    assert study.resources.gpus == 1 and len(trials) == 3
    assert trials[0].config["model"]["preset"] == "125M" and trials[0].config["train"]["steps"] == 7
    with pytest.raises(StudyError, match="no such profile"):
        parse_study(spec, profile="laptop")


def test_unknown_profile_on_the_command_line_exits_two(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"name": "s", "base": BASE}))
    result = CliRunner().invoke(app, ["run", str(path), "--profile", "paper"])
    assert result.exit_code == 2 and "no such profile" in result.output
    assert not (tmp_path / "mlruns").exists()
    result = CliRunner().invoke(app, ["run", str(path), "train.steps"])
    assert result.exit_code == 2 and "key=value" in result.output


def test_plan_lists_the_same_trials_as_run_would(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "s.yaml"
    spec = {"name": "s", "base": BASE, "axes": {"model.kernel_size": [1, 3]}, "seeds": [0, 1]}
    path.write_text(yaml.safe_dump(spec))
    result = CliRunner().invoke(app, ["plan", str(path)])
    assert result.exit_code == 0, result.output
    for trial in expand(parse_study(spec)):
        assert trial.trial_id in result.output
    assert not (tmp_path / "mlruns").exists()  # plan launches nothing and creates no store


def test_schema_covers_study_and_trial_fields():
    result = CliRunner().invoke(app, ["schema"])
    schema = json.loads(result.output)
    sections = {"base", "axes", "zip", "exclude", "variants", "seeds", "search", "scheduler", "profiles"}
    assert sections <= set(schema["properties"])
    text = json.dumps(schema)
    assert "kernel_size" in text and "tail_tokens" in text


def test_shipped_schema_file_is_current():
    shipped = Path(__file__).parents[1] / "studies" / "study.schema.json"
    from orchestrator.study.schema import study_json_schema

    assert json.loads(shipped.read_text()) == json.loads(json.dumps(study_json_schema()))

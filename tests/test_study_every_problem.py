"""Validation finds every problem at once: key typos at the top and in `base`, and wrong values, in one run, each
with its field path and a "did you mean" where a known name is close; an unknown study name lists the studies."""

from __future__ import annotations

import textwrap

from cli_support import run_cli

TYPOS = """\
name: typos
base:
  model: {preset: tiny, pos_encodng: rope, kernal_size: 3, processor: dapee}
  train: {steps: 0}
variants:
  - {label: A, baseline: true}
seed: [0, 1]
"""


def test_three_typos_and_two_wrong_values_in_one_run(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "typos.yaml"
    path.write_text(TYPOS)
    code, output = run_cli(capsys, "validate", path)
    assert code == 2
    assert "5 problem(s)" in output
    text = " ".join(output.split())  # rich may fold long lines
    for fragment in ("study.seed: unknown key 'seed' (did you mean 'seeds'?)",
                     "base.model.pos_encodng: unknown key 'pos_encodng' (did you mean 'pos_encoding'?)",
                     "base.model.kernal_size: unknown key 'kernal_size' (did you mean 'kernel_size'?)",
                     "base.model.processor: unknown score processor 'dapee' (did you mean 'dape'?)", "base.train.steps:"):
        assert fragment in text, fragment
    assert not (tmp_path / "mlruns").exists()


def test_no_suggestion_where_nothing_is_close(tmp_path, capsys):
    path = tmp_path / "far.yaml"
    path.write_text(textwrap.dedent("""\
        name: far
        base: {model: {preset: tiny, zzzzzz: 1}, train: {steps: 2}}
        variants: [{label: A}]
        """))
    code, output = run_cli(capsys, "validate", path)
    assert code == 2 and "unknown key 'zzzzzz'; valid keys:" in " ".join(output.split())
    assert "did you mean" not in output


def test_an_unknown_study_name_lists_the_studies(tmp_path, capsys, monkeypatch):
    (tmp_path / "studies").mkdir()
    for name in ("kernel_size", "d_dape"):
        (tmp_path / "studies" / f"{name}.yaml").write_text("name: x\n")
    monkeypatch.chdir(tmp_path)
    code, output = run_cli(capsys, "plan", "kernel_sise")
    text = " ".join(output.split())
    assert code == 2
    assert "The studies there: d_dape, kernel_size (did you mean 'kernel_size'?)." in text

"""Validation finds every problem at once: key typos at the top, in `base` and in a variant's `set:`, and wrong
values, in one run, each with its field path and a "did you mean" where a known name is close; an unknown study
name lists the studies."""

from __future__ import annotations

import textwrap
from pathlib import Path

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
                     "base.model.processor: unknown score processor 'dapee' (did you mean 'dape'?)",
                     "base.train.steps:"):
        assert fragment in text, fragment
    assert not (tmp_path / "mlruns").exists()


TWO_STAGES = """\
name: two_stages
base:
  model: {preset: tiny, kernal_size: 3}
  train: {steps: 2, batch_size: 2, seq_len: 32}
variants:
  - {label: A, baseline: true}
  - {label: B, set: {model.d_dpae: 8}}
"""


def test_a_typo_in_base_and_one_in_a_variants_set_in_one_validate(tmp_path, capsys, monkeypatch):
    # Both typos in one report: base's once (not again for each row that inherits it), the variant's with its row.
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "two_stages.yaml"
    path.write_text(TWO_STAGES)
    code, output = run_cli(capsys, "validate", path)
    text = " ".join(output.split())
    assert code == 2, output
    assert "2 problem(s)" in text, output
    assert "base.model.kernal_size: unknown key 'kernal_size' (did you mean 'kernel_size'?)" in text
    assert "variants[1] (B): model.d_dpae: unknown key 'd_dpae' (did you mean 'd_dape'?)" in text
    # The same with a typo at the top too: the study's field, base's and the variant's, still one report.
    path.write_text(TWO_STAGES + "seedz: [0, 1]\n")
    code, output = run_cli(capsys, "validate", path)
    text = " ".join(output.split())
    assert code == 2 and "3 problem(s)" in text, output
    for fragment in ("study.seedz: unknown key 'seedz' (did you mean 'seeds'?)", "base.model.kernal_size:",
                     "variants[1] (B): model.d_dpae:"):
        assert fragment in text, fragment
    # Once base is fixed, the variant's typo is what is left: nothing else was hiding behind it.
    path.write_text(TWO_STAGES.replace("kernal_size", "kernel_size"))
    code, output = run_cli(capsys, "validate", path)
    text = " ".join(output.split())
    assert code == 2 and "1 problem(s)" in text and "variants[1] (B): model.d_dpae:" in text, output


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


# --- issue 54: typos across config, variants and claims, every one in one run -----------------------------------
KERNEL_SIZE = (Path(__file__).resolve().parents[1] / "studies" / "kernel_size.yaml").read_text()


def _typos(tmp_path, *replacements: tuple[str, str]) -> Path:
    text = KERNEL_SIZE
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new, 1)
    path = tmp_path / "kernel_size.yaml"
    path.write_text(text)
    return path


def test_a_config_typo_a_bad_value_and_a_claims_label_typo_in_one_run(tmp_path, capsys, monkeypatch):
    # Before: "2 problem(s)" (the claim's label only once base was fixed), and no "did you mean" for the label.
    monkeypatch.chdir(tmp_path)
    path = _typos(tmp_path, ("pos_encoding: kerple", "pos_encoding: kerpel"), ("lr: 1.0e-3}", "lr: 1.0e-3x}"),
                  ("variant: DAPE1x3-Kerple, direction", "variant: DAPE1x3-Kerpel, direction"))
    code, output = run_cli(capsys, "validate", path)
    text = " ".join(output.split())
    assert code == 2, output
    assert "3 problem(s)" in text, output
    for fragment in ("base.model.pos_encoding: unknown position encoding 'kerpel' (did you mean 'kerple'?)",
                     "base.train.lr: Input should be a valid number", "got '1.0e-3x'",
                     "expect[1] (dape1x3_below_kerple): variant: 'DAPE1x3-Kerpel' is not a variant or row of this "
                     "study (did you mean 'DAPE1x3-Kerple'?)"):
        assert fragment in text, fragment
    assert not (tmp_path / "mlruns").exists()


def test_a_variants_bad_value_and_a_claims_two_typos_in_one_run(tmp_path, capsys, monkeypatch):
    # Before: "2 problem(s)" naming `model.kernel_size.k` (an internal tag) and `study.expect.0.compare.direction`;
    # the metric's typo only in a second round.
    monkeypatch.chdir(tmp_path)
    path = _typos(tmp_path, ("model.kernel_size: 3}", "model.kernel_size: 3x}"),
                  ("direction: below", "direction: bellow"), ("metric: ppl,", "metric: pplx,"))
    code, output = run_cli(capsys, "validate", path)
    text = " ".join(output.split())
    assert code == 2, output
    assert "3 problem(s)" in text, output
    for fragment in ("variants[2] (DAPE1x3-Kerple): model.kernel_size: Input should be a valid integer, got '3x'",
                     "expect[0] (dape1x1_below_kerple): direction: Input should be 'below' or 'above' "
                     "(did you mean 'below'?)",
                     "expect[0] (dape1x1_below_kerple): metric: unknown metric 'pplx' (did you mean 'ppl'?)"):
        assert fragment in text, fragment
    for internal in ("kernel_size.k", ".compare.", "study.expect.0"):
        assert internal not in text, internal


def test_a_claims_label_typo_gets_a_did_you_mean_when_the_rows_are_valid(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _typos(tmp_path, ("than: DAPE-Kerple,", "than: DAPE-Kerpel,"))
    code, output = run_cli(capsys, "validate", path)
    text = " ".join(output.split())
    assert code == 2 and "1 problem(s)" in text, output
    assert "'DAPE-Kerpel' is not a variant or row of this study (did you mean 'DAPE-Kerple'?)" in text, output

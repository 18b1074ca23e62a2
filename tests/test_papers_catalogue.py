"""The catalogue is the papers': every published value of studies/*.yaml carries where the paper gives it (the
paper, its table or section or the rebuttal, the paper's own name for the row and setting, the column), every
claim names where the paper says it, and the values and claims agree with the papers' numbers
(/work/shared/seeds: the DAPE V2 text with the authors' rebuttal, the DAPE summary). Fast: loads the files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from orchestrator import load_study
from orchestrator.reporting.published import PAPERS_TAIL_TOKENS, published_notes, tail_note
from orchestrator.study.trial_checks import resolved_rows

STUDIES = Path(__file__).resolve().parents[1] / "studies"
FILES = sorted(STUDIES.glob("*.yaml"))
# Where a claim's or value's source may point: a section, table, figure, proposition, the rebuttal, a summary.
PLACE = re.compile(r"§\d|Table|Figure|Proposition|rebuttal|summary|results|ablation|study", re.IGNORECASE)


def _raw(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.stem)
def test_every_published_value_says_where_the_paper_gives_it(path):
    raw = _raw(path)
    for profile, values in (raw.get("published") or {}).items():
        for index, value in enumerate(values):
            location = value.get("location")
            assert isinstance(location, dict), f"{path.stem}: published.{profile}[{index}] has no location"
            assert {"paper", "table", "row", "setting", "column"} <= set(location), (path.stem, index)
            assert location["paper"] in ("DAPE", "DAPE V2") and PLACE.search(location["table"]), (path.stem, index)
    study = load_study(path)  # the schema requires it too: a value without a location is a validation error
    for values in study.published.values():
        assert all(value.location.row and value.location.column for value in values)


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.stem)
def test_every_claim_names_the_paper_and_where_it_says_it(path):
    for claim in load_study(path).expect:
        assert "DAPE" in claim.source and PLACE.search(claim.source), f"{path.stem}: {claim.id}: {claim.source!r}"


@pytest.mark.parametrize("path", [p for p in FILES if "paper" in (_raw(p).get("profiles") or {})],
                         ids=lambda path: path.stem)
def test_every_paper_profile_shows_the_papers_values_or_says_why_it_has_none(path):
    study = load_study(path, profile="paper")
    assert bool(study.published_here()) != bool(study.unpublished_here()), path.stem
    if study.unpublished_here():  # the report's published section says it in one line
        assert published_notes(study)[0] == f"No published value: {study.unpublished_here()}"


def test_the_original_dapes_numbers_are_on_the_dape_rows():
    """DAPE V2's rebuttal: "Compared to original DAPE ... For NoPE: reduce the perplexity from 2618.13 to 259.81;
    For RoPE: from 306.78 to 68.32": 2618.13 and 306.78 are DAPE-NoPE's and DAPE-RoPE's, not NoPE's or RoPE's."""
    study = load_study(STUDIES / "position_encoding.yaml", profile="paper")
    by_value = {value.value: value for value in study.published_here()}
    for number, encoding, paper_row in ((2618.13, "nope", "DAPE-NoPE"), (306.78, "rope", "DAPE-RoPE"),
                                        (259.81, "nope", "DAPE1x3-NoPE"), (68.32, "rope", "DAPE1x3-RoPE")):
        value = by_value[number]
        assert value.variant == paper_row.split("-")[0] and value.where == {"model.pos_encoding": encoding}
        assert value.location.row == paper_row and value.length == 8192 and "rebuttal" in value.location.table
    assert not [value for value in study.published_here() if value.variant == "plain"]
    docs = (STUDIES.parent / "docs" / "cost_and_papers.md").read_text()
    assert re.search(r"(?<!DAPE-)NoPE 2618\.13", docs) is None and re.search(r"(?<!DAPE-)RoPE 306\.78", docs) is None
    assert "DAPE-NoPE 2618.13" in docs and "DAPE-RoPE 306.78" in docs


def _holds(claim, numbers: dict[str, float]) -> bool:
    """A compare or best claim judged on the paper's own numbers (one per row label)."""
    if claim.kind == "best":
        values = {label: numbers[label] for label in claim.among}
        pick = min if claim.direction == "lowest" else max
        return pick(values, key=values.get) == claim.variant
    left, right = numbers[claim.variant], numbers[claim.than]
    ratio, margin = claim.ratio or 1.0, claim.margin or 0.0
    return left <= ratio * right - margin if claim.direction == "below" else left >= ratio * right + margin


# DAPE's ablations at 8192 as the DAPE summary gives them: the bias ablation on Books at training length 512
# (Kerple 39.31, f(B) only 23.49, DAPE 17.88), the output forms at training lengths 128 and 512.
BIAS_ABLATION = {"Kerple": 39.31, "f(B) only": 23.49, "Concat_Residual": 17.88}
FORMS = [{"Concat_Residual": 5.00, "Concat": 5.03, "Add_Residual": 5.17},
         {"Concat_Residual": 3.70, "Concat": 3.69, "Add_Residual": 3.75}]


def test_the_output_form_claims_hold_on_the_papers_own_numbers():
    """The old `bias_only_near_kerple` (f(B) only at least 0.97x Kerple) fails on 23.49 against 39.31; the old
    `concat_residual_best` fails on Concat's 3.69 against Concat_Residual's 3.70 at training length 512."""
    study = load_study(STUDIES / "dape_variants.yaml")
    claims = {claim.id: claim for claim in study.expect}
    assert "bias_only_near_kerple" not in claims and "concat_residual_best" not in claims
    judged = 0
    for claim in claims.values():
        than = claim.than if claim.kind == "compare" and claim.than != "baseline" else "Kerple"
        claim = claim.model_copy(update={"than": than}) if claim.kind == "compare" else claim
        rows = {claim.variant, than} if claim.kind == "compare" else set(claim.among)
        for numbers in [BIAS_ABLATION, *FORMS]:
            if rows <= set(numbers):
                assert _holds(claim, numbers), f"{claim.id} contradicts the paper's {numbers}"
                judged += 1
    assert judged >= 4  # f(B) only below Kerple and above DAPE; Concat_Residual below Add_Residual at both lengths
    below_kerple = claims["bias_only_below_kerple"]
    assert below_kerple.variant == "f(B) only" and below_kerple.direction == "below" and below_kerple.ratio is None


@pytest.mark.parametrize("path", [p for p in FILES if "paper" in (_raw(p).get("profiles") or {})],
                         ids=lambda path: path.stem)
def test_every_paper_profile_scores_the_papers_tail_or_its_report_says_what_it_does(path):
    study = load_study(path, profile="paper")
    rows = [row for row in resolved_rows(study) if row.config.che is None]
    shorter = [row for row in rows if row.config.eval.tail_tokens != PAPERS_TAIL_TOKENS]
    for row in shorter:  # only where the training length is shorter than the papers' tail
        assert row.config.eval.tail_tokens == row.config.train.seq_len < PAPERS_TAIL_TOKENS, row.where
    note = tail_note(study)
    assert bool(note) == bool(shorter), path.stem
    if shorter:
        assert note in published_notes(study)
        assert f"the last 128 tokens at training length 128 ({len(shorter)} row(s))" in note


def test_the_time_cost_values_say_what_is_known_and_assumed():
    study = load_study(STUDIES / "time_cost.yaml", profile="paper")
    for value in study.published_here():
        assert value.note and "not stated" in value.note and "assumed" in value.note
        assert value.location.column == "350M" and "not stated" in value.location.setting


def test_one_docs_page_lists_every_value_and_claim_with_its_location():
    """docs: "The papers' numbers and claims", generated from the study files at each build (docsgen)."""
    from docsgen import hooks, papers_catalogue

    page = papers_catalogue.render()
    assert hooks.generated_pages()["papers_catalogue.md"] == page
    assert "papers_catalogue.md" in (STUDIES.parent / "mkdocs.yml").read_text()  # in the site's navigation
    lines = page.splitlines()
    for path in FILES:
        study = load_study(path)
        for profile, values in study.published.items():
            for value in values:
                start = f"| `{study.name}` ({profile}) | `{value.variant}`"
                line = next(text for text in lines if text.startswith(start) and f"| {value.value:g} |" in text)
                assert value.location.row in line and value.location.table.split(",")[0] in line
        for claim in study.expect:
            line = next(text for text in lines if f"| `{claim.id}` |" in text)
            assert " ".join(claim.source.split()) in line
        for profile, why in study.unpublished.items():
            assert any(text.startswith(f"| `{study.name}` ({profile}) | {' '.join(why.split())}") for text in lines)

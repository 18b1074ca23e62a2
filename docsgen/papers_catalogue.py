"""The site's page "The papers' numbers and claims": every published value and every claim of the catalogue
(studies/*.yaml), each with where the paper gives it, generated from the study files at each build so that it
cannot drift from them. A reader checks the catalogue against the papers in minutes from this one page."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUDIES = ROOT / "studies"

INTRO = """# The papers' numbers and claims

Every number the catalogue's studies set beside ours (`published:`) and every claim they judge (`expect:`),
with where the paper gives it. Generated from `studies/*.yaml` at each build of the site.

The texts this catalogue was checked against are the DAPE V2 paper's text with the authors' rebuttal on
OpenReview, and summaries of DAPE; a value read in a summary says so in its location. Where the rebuttal quotes a
table without naming the column, the location says which column is implied. The paper's own name for a row may
differ from the study's label: the paper's DAPE-NoPE is the `DAPE` row at `model.pos_encoding: nope`.
How the report shows them: [Cost, fronts and the papers' numbers](cost_and_papers.md#the-papers-numbers-beside-ours).
"""


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "/")


def _row_of(value) -> str:
    where = ", ".join(f"{key}={item}" for key, item in value.where.items())
    return f"`{value.variant}`" + (f" ({where})" if where else "")


def _metric_of(value) -> str:
    return f"{value.metric} at {value.length}" if value.length is not None else value.metric


def render() -> str:
    from orchestrator import load_study

    values = ["## Published values", "",
              "| study (profile) | our row | metric | value | the paper's row (setting) | where the paper gives it |",
              "|---|---|---|---|---|---|"]
    missing = ["", "## Profiles without a published value", "", "| study (profile) | why |", "|---|---|"]
    claims = ["", "## Claims", "", "| study | claim | what it says | where the paper says it |", "|---|---|---|---|"]
    for path in sorted(STUDIES.glob("*.yaml")):
        study = load_study(path)
        for profile, published in study.published.items():
            for value in published:
                where = value.location
                note = f" Note: {value.note}." if value.note else ""
                values.append(f"| `{study.name}` ({profile}) | {_cell(_row_of(value))} | {_cell(_metric_of(value))} | "
                              f"{value.value:g} | {_cell(f'{where.row} ({where.setting})')} | "
                              f"{_cell(f'{where.paper}, {where.table}, column {where.column}.{note}')} |")
        for profile, why in study.unpublished.items():
            missing.append(f"| `{study.name}` ({profile}) | {_cell(why)} |")
        for claim in study.expect:
            said = _cell(claim.text or claim.id)
            claims.append(f"| `{study.name}` | `{claim.id}` | {said} | {_cell(claim.source)} |")
    return "\n".join([INTRO, *values, *missing, *claims]) + "\n"

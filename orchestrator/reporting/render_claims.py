"""The report's Claims section (Markdown and HTML): the first thing a reader sees, since it says which of the
paper's claims this run reproduces. One row per claim (verdict, seeds, Holm-corrected p, why), then each
claim's measured values. A verdict on fewer than 3 seeds reads "holds on 1 seed, untested" (claims.py's
`ClaimResult.words`), in italics, never the bold **holds** of a claim that passed the paired test."""

from __future__ import annotations

import math
from html import escape

from tabulate import tabulate

from .claims import ClaimResult, headline
from .stats import format_p

INTRO = ("Each claim of the study file's `expect:` section, judged on this run: *holds* (on the means of the "
         "seeds and a paired test by seed, Holm-corrected across the claims, at 0.05), *fails* (the means "
         "contradict it) or *inconclusive* (trials missing, fewer seeds than the claim's min_seeds, or not "
         "significant). With fewer than 3 seeds no test is possible: the verdict rests on the means alone and "
         "says so (*holds on 1 seed, untested*); a difference smaller than the seed-to-seed spread reads the same.")


def _headline(results: list[ClaimResult]) -> str:
    return headline(results)


def _verdict_cell(result: ClaimResult) -> str:
    return f"**{result.words}**" if result.tested or result.verdict == "inconclusive" else f"*{result.words}*"


def _claim_text(result: ClaimResult) -> str:
    return result.claim.text or result.claim.kind


def _row(result: ClaimResult) -> list[str]:
    p = format_p(result.p_holm) if not math.isnan(result.p_holm) else "–"
    return [result.claim.id, _claim_text(result), result.claim.source, _verdict_cell(result), str(result.seeds),
            result.measured(), p, result.reason or "–"]


HEADER = ["claim", "statement", "source", "verdict", "seeds", "measured", "p (Holm)", "why"]


def markdown(results: list[ClaimResult]) -> list[str]:
    if not results:
        return []
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    out = ["## Claims", "", f"{INTRO} Here: {_headline(results)}.", ""]
    body = [[cell(text) for text in _row(result)] for result in results]
    out += [tabulate(body, headers=HEADER, tablefmt="pipe", disable_numparse=True), ""]
    for result in results:
        if result.checks:
            out += [f"**{result.claim.id}** ({result.words}):", ""]
            out += [f"- {'✓' if check.holds else '✗'} {cell(check.text)}"
                    + (f" (one-sided p = {check.p:.3g})" if not math.isnan(check.p) else "") for check in result.checks]
            out.append("")
    return out


def html(results: list[ClaimResult]) -> str:
    if not results:
        return ""
    head = "".join(f"<th>{escape(h)}</th>" for h in HEADER)
    rows = []
    for result in results:
        cells = _row(result)
        cells[3] = result.words
        tds = "".join(f"<td>{escape(text)}</td>" for text in cells)
        strength = "" if result.tested or result.verdict == "inconclusive" else " claim-untested"
        rows.append(f'<tr class="claim-{result.verdict}{strength}">{tds}</tr>')
    details = []
    for result in results:
        if result.checks:
            items = "".join(f"<li>{'✓' if c.holds else '✗'} {escape(c.text)}"
                            + (f" (one-sided p = {c.p:.3g})" if not math.isnan(c.p) else "") + "</li>"
                            for c in result.checks)
            details.append(f"<details><summary>{escape(result.claim.id)}: {escape(result.words)}, "
                           f"{escape(result.measured())}</summary><ul>{items}</ul></details>")
    return (f'<h2 id="claims">Claims</h2><p class="meta">{escape(INTRO.replace("*", "").replace("`", ""))} Here: '
            f"{escape(_headline(results))}.</p>"
            f'<table class="claims"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
            + "".join(details))

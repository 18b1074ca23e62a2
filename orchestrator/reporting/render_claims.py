"""The report's claims (Markdown and HTML), in two parts.

At the top, the first thing a reader sees: one line per claim, read at a glance: its verdict, its effect
with the interval, the seeds it was judged on and its source. After the tables, each claim in detail: why
(the test, Holm's p, what it waits for), and every check with its measured means, effect and p-values
(collapsible in HTML). A verdict on one seed reads "holds on 1 seed, untested" (claims.py's
`ClaimResult.words`) in italics and is never coloured like a tested verdict.
"""

from __future__ import annotations

from html import escape

from tabulate import tabulate

from ..judging.claims import FAILS, HOLDS, INCONCLUSIVE, ClaimResult, decision_summary

DOCS = "docs/deciding.md"


def intro(results: list[ClaimResult]) -> str:
    alpha = results[0].alpha if results else 0.05
    return (f"Each claim of the study's `expect:` section, judged on this run: *holds* or *fails* where a paired "
            f"test by seed decides it (two-sided, at {alpha:g} for the study: Holm-corrected across its claims, "
            f"and spent over the planned looks where seeds were added), else *inconclusive*. The effect is the "
            f"claim's difference, ratio or value with its {1 - alpha:.0%} interval, first as a size (a ratio "
            f"relative to 1 in %: '4.1% lower [3.6, 4.6]'; a difference with its share of the other side's mean), "
            f"for that claim alone (valid "
            f"over its looks; the verdicts are Holm-corrected across the claims, so an interval clear of 0 can "
            f"stand beside an inconclusive verdict). The interval is the estimate's range, not a verdict; and a "
            f"claim decided because its effect looked large overstates it where the true effect is near the "
            f"smallest its seeds can decide (about 2x at 0.5 seed SD, 1.3x at 1 SD, none from 2 SD: "
            f"bench_decisions.py), so read an early stop's effect as an upper estimate. Ratios and bounds are "
            f"tested on the log scale (geometric means). With one seed no test is possible: the verdict says "
            f"so. The rule: {DOCS}. Here: {decision_summary(results)}.{_p_note(results)}")


def _p_note(results: list[ClaimResult]) -> str:
    """Why a claim's p is not the significance table's p of the same rows (where a claim has one)."""
    if not any(result.tested for result in results):
        return ""
    return (" A claim's p is not the significance table's: the table runs a fixed-n two-sided paired t-test on "
            "every seed the rows have, Holm over the table's comparisons; a claim's test is one-sided per check, "
            "spent over the planned looks on its look's seeds, on the log scale for ratios and bounds, and "
            "Holm-corrected over the claims.")


def _effect(result: ClaimResult) -> str:
    if result.effect():  # how big first (relative, in %, for a ratio), then the effect as the claim states it
        return result.effect(sized=True)
    return "no interval on 1 seed" if result.checks and not result.tested else "–"


def _seeds(result: ClaimResult) -> str:
    if len(result.looks) > 1:
        return f"{result.seeds} (looks {', '.join(map(str, result.looks))})"
    return str(result.seeds) if result.seeds else "–"


def _strong(result: ClaimResult) -> bool:
    """A verdict the test reached (or an inconclusive one): shown in bold; an untested one is in italics."""
    return result.tested or result.verdict == INCONCLUSIVE


def _row(result: ClaimResult) -> list[str]:
    return [result.claim.id, result.claim.statement, result.words, _effect(result), _seeds(result),
            result.claim.source]


HEADER = ["claim", "statement", "verdict", "estimate [interval, not a test], claimed", "seeds", "source"]


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(results: list[ClaimResult]) -> list[str]:
    """The claims section: its heading, what the verdicts mean, and one line per claim."""
    if not results:
        return []
    body = []
    for result in results:
        cells = [_md(text) for text in _row(result)]
        cells[2] = f"**{cells[2]}**" if _strong(result) else f"*{cells[2]}*"
        body.append(cells)
    return ["## Claims", "", intro(results), "", tabulate(body, headers=HEADER, tablefmt="pipe", disable_numparse=True),
            "", "Each claim's checks and the test behind its verdict follow the tables.", ""]


def _check_lines(result: ClaimResult) -> list[str]:
    lines = []
    for check in result.checks:
        line = f"{'✓' if check.holds else '✗'} {check.text}"
        ev = check.evidence
        if ev is not None:
            line += (f" — {ev.words} {ev.effect:.4g} [{ev.low:.4g}, {ev.high:.4g}], sequential one-sided p "
                     f"{ev.p_right:.3g} that it holds, {ev.p_wrong:.3g} that it does not")
        lines.append(line)
    return lines


def _why(result: ClaimResult) -> str:
    parts = [result.reason or "–"]
    if result.tested:
        parts.append(f"the claim's p before Holm: {result.p:.3g}")
    return "; ".join(parts)


def details_markdown(results: list[ClaimResult], title: str) -> list[str]:
    """After the tables: each claim's verdict, why, and its checks."""
    out = [f"## {title}", ""]
    for result in results:
        words = f"**{result.words}**" if _strong(result) else f"*{result.words}*"
        out += [f"**{result.claim.id}** ({words}, {result.claim.source}): "
                f"{_md(result.claim.statement)}",
                "", f"- why: {_md(_why(result))}"]
        out += [f"- {_md(line)}" for line in _check_lines(result)] + [""]
    return out


def _css_class(result: ClaimResult) -> str:
    """holds / fails / inconclusive by the test; an untested verdict gets claim-untested alone: never the
    colour of a pass or a failure."""
    if not _strong(result):
        return "claim-untested"
    return {HOLDS: "claim-holds", FAILS: "claim-fails"}.get(result.verdict, "claim-inconclusive")


def html(results: list[ClaimResult]) -> str:
    if not results:
        return ""
    head = "".join(f"<th>{escape(h)}</th>" for h in HEADER)
    rows = []
    for result in results:
        cells = [f"<td>{escape(text)}</td>" for text in _row(result)]
        cells[2] = f'<td class="verdict">{escape(result.words)}</td>'
        rows.append(f'<tr class="{_css_class(result)}">{"".join(cells)}</tr>')
    text = escape(intro(results).replace("*", "").replace("`", ""))
    return (f'<h2 id="claims">Claims</h2><p class="meta">{text}</p>'
            f'<table class="claims"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
            '<p class="meta">Each claim\'s checks and the test behind its verdict follow the tables.</p>')


def details_html(results: list[ClaimResult], title: str) -> str:
    """After the tables: one collapsible block per claim."""
    blocks = []
    for result in results:
        items = "".join(f"<li>{escape(line)}</li>" for line in [f"why: {_why(result)}", *_check_lines(result)])
        summary = f"{result.claim.id}: {result.words}" + (f", {result.effect(sized=True)}" if result.effect() else "")
        blocks.append(f'<details class="{_css_class(result)}"><summary>{escape(summary)}</summary>'
                      f"<p>{escape(result.claim.statement)} ({escape(result.claim.source)})</p>"
                      f"<ul>{items}</ul></details>")
    return f'<h2 id="claim-details">{escape(title)}</h2>' + "".join(blocks)


"""The tables as LaTeX for a paper (tables.tex): booktabs rules, best in bold, a Δ-vs-baseline column,
significance markers. `\\input{tables.tex}` after `\\usepackage{booktabs}`."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from . import cells
from .document import ReportDocument
from .outline import sections
from .tables import Table

_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
            "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "±": r"$\pm$", "Δ": r"$\Delta$",
            "×": r"$\times$", "·": r"$\cdot$", "≥": r"$\geq$", "≤": r"$\leq$", "–": "--", "<": r"$<$", ">": r"$>$"}
_PATTERN = re.compile("|".join(re.escape(key) for key in _SPECIAL))


def escape(text: str) -> str:
    return _PATTERN.sub(lambda match: _SPECIAL[match.group(0)], text)


def _number(value: float, decimals: int) -> str:
    """As in the Markdown and HTML (cells.number): a value that rounds to zero is 0.000, never -0.000."""
    return cells.number(value, decimals)


def _cell(table: Table, row, column: str) -> str:
    r"""`$61.876_{\pm 2.768}$`: the std as a subscript keeps wide tables (7 lengths) within a column."""
    cell = row.cells[column]
    if cell.n == 0:
        return "--"
    if cell.diverged:
        return escape(cells.diverged(cell))
    decimals = table.family.decimals
    body = _number(cell.mean, decimals)
    if row.label in table.best(column):
        body = rf"\mathbf{{{body}}}"
    if cell.n > 1 and not math.isnan(cell.std):
        body += rf"_{{\pm {_number(cell.std, decimals)}}}"
    marker = cells.marker(row, column)
    if marker:
        body += rf"^{{{marker}}}"
    return f"${body}$"


def _delta(table: Table, row) -> str:
    text = cells.delta(table, row)
    return "--" if text == cells.DASH else "$" + text.replace("%", r"\%") + "$"


def table_tex(table: Table, study_name: str) -> str:
    has_ratio = table.has_baseline and table.family.compare == "ratio"
    extra = (1 if has_ratio else 0) + (1 if table.has_baseline else 0)
    names = len(cells.name_header(table))
    spec = "l" * names + "c" * len(table.columns) + "c" + "r" * extra
    header = [escape(name.capitalize()) for name in cells.name_header(table)]
    header += [f"${escape(table.header(c)).replace('$', '')}$" if table.family.by_length
               else escape(table.header(c)) for c in table.columns] + ["$n$"]
    # at the caption's column
    header += (["ratio"] if has_ratio else []) + ([r"$\Delta$"] if table.has_baseline else [])
    lines = [r"\begin{table}[t]", r"\centering", r"\small", r"\setlength{\tabcolsep}{4pt}",
             rf"\caption{{{escape(table.family.title)}. {escape(table.caption())}}}",
             rf"\label{{tab:{re.sub(r'[^A-Za-z0-9]+', '-', study_name)}-{table.family.key}}}",
             rf"\begin{{tabular}}{{{spec}}}", r"\toprule", " & ".join(header) + r" \\", r"\midrule"]
    for row in table.rows:
        first_of_block = table.blocks and cells.names(table, row)[0]
        if first_of_block and row is not table.rows[0]:
            lines.append(r"\midrule")  # one block per grid point
        line = [escape(name) for name in cells.names(table, row)]
        line += [_cell(table, row, c) for c in table.columns] + [cells.seeds(row)]
        if has_ratio:
            ratio = cells.ratio(table, row)
            line.append("--" if ratio == cells.DASH else f"${ratio}$")
        if table.has_baseline:
            line.append(_delta(table, row))
        lines.append(" & ".join(line) + r" \\")
        if row.is_baseline and table.has_baseline and row is table.rows[0] and not table.blocks:
            lines.append(r"\midrule")  # the baseline first, then the rows compared with it
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines)


def best_points_tex(document: ReportDocument) -> str:
    best = document.best_points
    assert best is not None, "the section is shown only when the document has them (outline.SECTIONS)"
    lines = [r"\begin{table}[t]", r"\centering", r"\small", rf"\caption{{{escape(best.caption)}}}",
             rf"\label{{tab:{re.sub(r'[^A-Za-z0-9]+', '-', document.study_name)}-best-grid-point}}",
             rf"\begin{{tabular}}{{ll{'r' * (len(best.header) - 2)}}}", r"\toprule",
             " & ".join(escape(h) for h in best.header) + r" \\", r"\midrule"]
    lines += [" & ".join(escape(cell) for cell in line) + r" \\" for line in best.body]
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines)


# The sections of the outline (outline.py) that tables.tex holds, each as LaTeX tables; the rest of the report
# (its prose, plots and listings) is for report.md and report.html.
BLOCKS: dict[str, Callable[[ReportDocument, str], list[str]]] = {
    "headline": lambda document, title: [table_tex(t, document.study_name) + "\n" for t in document.tables[:1]],
    "tables": lambda document, title: [table_tex(t, document.study_name) + "\n" for t in document.tables[1:]],
    "best_points": lambda document, title: [best_points_tex(document) + "\n"],
}
LEFT_OUT = frozenset({"header", "claims", "search", "published", "cost", "plots", "claim_details", "provenance",
                      "unfinished", "outside", "trials"})


def render(document: ReportDocument) -> str:
    header = [(f"% Ablation tables for study {escape(document.study_name)}, generated from the MLflow store by "
              "`orchestrator report`."), r"% Needs \usepackage{booktabs} in the preamble.", ""]
    return "\n".join(header + [part for section in sections(document) if section.key in BLOCKS
                               for part in BLOCKS[section.key](document, section.title)])

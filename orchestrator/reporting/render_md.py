"""The report as Markdown (report.md): what `orchestrator run` prints and what a repository shows."""

from __future__ import annotations

from tabulate import tabulate

from . import cells, render_claims
from .document import ReportDocument
from .tables import Table


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("*", "\\*")


def _grid(header: list[str], body: list[list[str]], numbers: bool = True) -> str:
    align = ["left"] + ["right" if numbers else "left"] * (len(header) - 1)
    return tabulate(body, headers=header, tablefmt="pipe", disable_numparse=True, colalign=align)


def main_table(table: Table) -> str:
    decimals = table.family.decimals
    header = ["variant"] + [table.header(c) for c in table.columns] + ["n"]
    if table.has_baseline:
        header += ([f"ratio ({table.header(table.reference)})"] if table.family.compare == "ratio" else [])
        header += [f"Δ ({table.header(table.reference)})"]
    body = []
    for row in table.rows:
        line = [_escape(row.label)]
        for column in table.columns:
            text = cells.mean_std(row.cells[column], decimals)
            if row.label in table.best(column):
                text = f"**{text}**"
            line.append(text + _escape(cells.marker(row, column)))
        line.append(cells.seeds(row))
        if table.has_baseline:
            line += [cells.ratio(table, row)] if table.family.compare == "ratio" else []
            line.append(cells.delta(table, row))
        body.append(line)
    return _grid(header, body)


def significance_table(table: Table) -> str | None:
    rows = [row for row in table.rows if row.comparisons]
    if not rows:
        return None
    header = ["variant"] + [table.header(c) for c in table.columns]
    body = [[_escape(cells.compared_label(table, row))] + [_escape(cells.significance(row.comparisons.get(c), table.family.decimals))
                                    for c in table.columns] for row in rows]
    return _grid(header, body, numbers=False)


def render(document: ReportDocument) -> str:
    out = [f"# Ablation report: {document.study_name}", ""]
    if document.description:
        out += [document.description.strip(), ""]
    out += [f"{document.counts()}. From the MLflow store {document.tracking_uri} (experiment "
            f"{document.experiment_id})."]
    out += [f"- {name}: {value}" for name, value in document.provenance()]
    out.append("")
    out += render_claims.markdown(document.claims)
    if not document.tables:
        out += [document.no_tables_text(), ""]
    for number, table in enumerate(document.tables, start=1):
        out += [f"## {table.family.title}", "", f"*Table {number}.* {_escape(table.caption())}", "", main_table(table), ""]
        significance = significance_table(table)
        if significance:
            out += [f"Against the baseline ({', '.join(table.baseline_names)}): difference of means, Holm-corrected "
                    "p-value, Cohen's d, test and seeds:", "", significance, ""]
    if document.plots:
        out += ["## Plots", ""]
        for plot in document.plots:
            out += [f"![{plot.title}](plots/{plot.path.name})", "", f"*{_escape(plot.caption)}*", ""]
    unfinished = document.unfinished()
    if unfinished:
        out += ["## Trials not finished", ""] + [f"- {_escape(line)}" for line in unfinished] + [""]
    outside = document.outside_lines()
    if outside:
        out += ["## Runs this study file no longer defines (left out of the tables)", ""]
        out += [f"- {_escape(line)}" for line in outside] + [""]
    listing = document.trial_listing()
    out += ["## Trials", "", _grid(list(listing.columns), listing.to_numpy().tolist(), numbers=False), ""]
    return "\n".join(out)

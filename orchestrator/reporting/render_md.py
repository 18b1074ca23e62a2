"""The report as Markdown (report.md): what `orchestrator run` prints and what a repository shows."""

from __future__ import annotations

from collections.abc import Callable

from tabulate import tabulate

from . import cells, render_claims, render_search
from .document import ReportDocument
from .outline import report_title, sections
from .tables import Table


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("*", "\\*")


def _grid(header: list[str], body: list[list[str]], numbers: bool = True, names: int = 1) -> str:
    align = ["left"] * names + ["right" if numbers else "left"] * (len(header) - names)
    return tabulate(body, headers=header, tablefmt="pipe", disable_numparse=True, colalign=align)


def main_table(table: Table, bold: bool = True) -> str:
    decimals = table.family.decimals
    header = cells.name_header(table) + [table.header(c) for c in table.columns] + ["n"]
    if table.has_baseline:
        header += ([f"ratio ({table.header(table.reference)})"] if table.family.compare == "ratio" else [])
        header += [f"Δ ({table.header(table.reference)})"]
    body = []
    for row in table.rows:
        line = [_escape(name) for name in cells.names(table, row)]
        for column in table.columns:
            text = cells.mean_std(row.cells[column], decimals)
            if bold and row.label in table.best(column):
                text = f"**{text}**"
            line.append(text + _escape(cells.marker(row, column)))
        line.append(cells.seeds(row))
        if table.has_baseline:
            line += [cells.ratio(table, row)] if table.family.compare == "ratio" else []
            line.append(cells.delta(table, row))
        body.append(line)
    return _grid(header, body, names=len(cells.name_header(table)))


def significance_table(table: Table) -> str | None:
    """The comparisons with their p-values and effect sizes; None where none was tested (the caption and
    `significance_note` say why)."""
    rows = [row for row in table.rows if row.comparisons]
    if not rows or not table.n_tested():
        return None
    header = (["grid point", "variant"] if table.blocks else ["variant"]) + [table.header(c) for c in table.columns]
    body = [[_escape(name) for name in cells.compared_names(table, row)]
            + [_escape(cells.significance(row.comparisons.get(c), table.family.decimals)) for c in table.columns]
            for row in rows]
    return _grid(header, body, numbers=False, names=2 if table.blocks else 1)


def significance_note(table: Table) -> str | None:
    """One sentence where a table compares rows with a baseline but could test none of them."""
    if table.family.significance and any(row.comparisons for row in table.rows) and not table.n_tested():
        return table.untested_reason()
    return None


def baselines(table: Table) -> str:
    if table.blocks and len(table.baseline_names) > 1:
        baselines = ", ".join(dict.fromkeys(row.variant for row in table.rows if row.is_baseline))
        return f"the {baselines} row of each grid point"
    return ", ".join(table.baseline_names)


def _header(document: ReportDocument, title: str) -> list[str]:
    out = [f"# {report_title(document)}", ""]
    if document.description:
        out += [document.description.strip(), ""]
    out += [(f"{document.counts()}. From the MLflow store {document.tracking_uri} (experiment "
            f"{document.experiment_id}).")]
    setup = document.setup()
    out += ["", "Setup:"] + [f"- {name}: {_escape(text)}" for name, text in setup] if setup else []
    out.append("")
    return out


def _provenance(document: ReportDocument, title: str) -> list[str]:
    return [f"## {title}", ""] + [f"- {name}: {value}" for name, value in document.provenance()] + [""]


def _headline(document: ReportDocument, title: str) -> list[str]:
    """Table 1 (the headline family's), or why there is none."""
    return _numbered(document, "headline") if document.tables else [document.no_tables_text(), ""]


def _numbered(document: ReportDocument, section: str) -> list[str]:
    """The section's tables (ReportDocument.numbered_tables), each with its title, caption, CSV and significance."""
    out = []
    for number, table in document.numbered_tables(section):
        out += [f"## {table.family.title}", "", f"*Table {number}.* {_escape(table.caption())}", "",
                main_table(table), "",
                f"Every number behind the table: [table_{table.family.key}.csv](table_{table.family.key}.csv)", ""]
        note = significance_note(table)
        if note:
            out += [f"Significance: {_escape(note)}", ""]
        significance = significance_table(table)
        if significance:
            out += [(f"Against the baseline ({baselines(table)}): difference of means, Holm-corrected p-value, "
                    "Cohen's d, test and seeds:"), "", significance, ""]
    return out


def _best_points(document: ReportDocument, title: str) -> list[str]:
    best = document.best_points
    assert best is not None, "the section is shown only when the document has them (outline.SECTIONS)"
    return [f"## {title}", "", f"*{_escape(best.caption)}*", "",
            _grid(best.header, [[_escape(cell) for cell in line] for line in best.body], names=2), ""]


def _plots(document: ReportDocument, title: str) -> list[str]:
    out = [f"## {title}", ""]
    for plot in document.plots:
        vector = f" ([SVG](plots/{plot.vector.name}))" if plot.vector else ""
        out += [f"![{plot.title}](plots/{plot.path.name})", "", f"*{_escape(plot.caption)}*{vector}", ""]
    return out


def _published(document: ReportDocument, title: str) -> list[str]:
    from .published import CAPTION, HEADER

    out = [f"## {title}", ""]
    if document.published:
        body = [[_escape(text) for text in line.texts()] for line in document.published]
        out += [f"*{_escape(CAPTION)}*", "", _grid(HEADER, body, numbers=False), ""]
    return out + [line for note in document.published_notes for line in (_escape(note), "")]


def _cost(document: ReportDocument, title: str) -> list[str]:
    front = document.cost
    assert front is not None, "the section is shown only when the document has one (outline.SECTIONS)"
    out = [f"## {title}", ""]
    if front.plot is not None:
        out += [f"![{front.plot.title}](plots/{front.plot.path.name})", ""]
    header, body = front.table()
    out += [f"*{_escape(front.caption())}* ([SVG](plots/cost_front.svg))" if front.plot is not None
            else f"*{_escape(front.caption())}*", "", "The rows on the Pareto front, cheapest first:", "",
            _grid(header, [[_escape(cell) for cell in line] for line in body]), ""]
    return out


def _search(document: ReportDocument, title: str) -> list[str]:
    assert document.search is not None, "the section is shown only when the document has one (outline.SECTIONS)"
    return render_search.markdown(document.search)


def _listed(lines: list[str], title: str) -> list[str]:
    return [f"## {title}", ""] + [f"- {_escape(line)}" for line in lines] + [""]


def _trials(document: ReportDocument, title: str) -> list[str]:
    listing = document.trial_listing()
    links, note = document.run_links()
    if "run id" in listing:  # each run id a link to the run's page in MLflow's UI
        listing["run id"] = [f"[{run_id}]({link})" if link else run_id
                             for run_id, link in zip(listing["run id"], links)]
    out = [f"## {title}", ""] + ([f"*{_escape(note)}*", ""] if note else [])
    return out + [_grid(list(listing.columns), listing.to_numpy().tolist(), numbers=False), ""]


# Each section of the outline (outline.py) as Markdown lines: (document, the section's title) -> lines.
BLOCKS: dict[str, Callable[[ReportDocument, str], list[str]]] = {
    "header": _header,
    "headline": _headline,
    "claims": lambda document, title: (render_claims.markdown(document.claims)
                                       + ([document.decide_note, ""] if document.decide_note else [])),
    "search": _search,
    "tables": lambda document, title: _numbered(document, "tables"),
    "published": _published,
    "cost": _cost,
    "best_points": _best_points,
    "plots": _plots,
    "claim_details": lambda document, title: render_claims.details_markdown(document.claims, title),
    "provenance": _provenance,
    "unfinished": lambda document, title: _listed(document.unfinished(), title),
    "outside": lambda document, title: _listed(document.outside_lines(), title),
    "trials": _trials,
}


def render(document: ReportDocument) -> str:
    return "\n".join(line for section in sections(document) for line in BLOCKS[section.key](document, section.title))


def summary(document: ReportDocument) -> str:
    """What the command line prints: the counts, a search's best, the headline table, what did not finish.
    The whole report is in report.md / report.html (`orchestrator report --print` prints report.md)."""
    out = [f"{document.study_name}: {document.counts()}."]
    if document.search is not None:
        out += render_search.lines(document.search)
    if document.tables:
        table = document.tables[0]
        out += ["", f"{table.family.title} ({document.value_text}):", main_table(table, bold=False)]
        tested = table.comparisons()
        if table.n_tested():
            significant = sum(comparison.significant for comparison in tested)
            out.append(f"{significant} of {table.n_tested()} comparison(s) with the baseline significant "
                       "(paired t-test, Holm-corrected, p < 0.05).")
        elif significance_note(table):
            out.append(f"Significance: {significance_note(table)}")
    else:
        out.append(document.no_tables_text())
    unfinished = document.unfinished()
    if unfinished:
        out += ["", f"{len(unfinished)} trial(s) not finished:"] + [f"  {line}" for line in unfinished[:10]]
        out += [f"  ... and {len(unfinished) - 10} more (see the report)"] if len(unfinished) > 10 else []
    return "\n".join(out)

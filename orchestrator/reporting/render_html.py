"""The report as one self-contained HTML page (report.html): the plots are embedded, no network needed."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from html import escape

from . import cells, render_claims, render_md, render_search
from .document import ReportDocument
from .outline import report_title, sections
from .tables import Table

STYLE = """
body { font-family: "Latin Modern Roman", "Computer Modern", Georgia, "Times New Roman", serif; color: #111;
       max-width: 1080px; margin: 2.5em auto; padding: 0 1.5em; line-height: 1.45; }
h1 { font-size: 1.7em; margin-bottom: 0.2em; }
h2 { font-size: 1.25em; margin-top: 2em; border-bottom: 1px solid #ccc; padding-bottom: 0.2em; }
p.meta, ul.meta { color: #444; font-size: 0.92em; }
table { border-collapse: collapse; margin: 0.8em 0 1.4em; font-variant-numeric: tabular-nums; }
caption { caption-side: top; text-align: left; font-size: 0.88em; color: #333; padding-bottom: 0.6em;
          max-width: 1000px; }
thead th { border-top: 2px solid #111; border-bottom: 1px solid #111; padding: 0.35em 0.8em; text-align: right; }
tbody td { padding: 0.28em 0.8em; text-align: right; white-space: nowrap; }
tbody tr:last-child td { border-bottom: 2px solid #111; }
th:first-child, td:first-child { text-align: left; }
tr.baseline td { background: #f4f4f4; }
tr.block-start td { border-top: 1px solid #999; }
p.note { font-size: 0.9em; color: #444; }
td.best { font-weight: bold; }
sup.sig { color: #b00; font-weight: bold; }
table.significance td, table.significance th { font-size: 0.85em; text-align: left; }
table.trials td, table.trials th { text-align: left; }
table.trials td, table.trials th { font-size: 0.82em; }
figure { margin: 1.2em 0 2em; }
figure img { max-width: 100%; border: 1px solid #eee; }
figcaption { font-size: 0.88em; color: #333; }
li.problem { color: #a00; }
table.claims td, table.claims th { text-align: left; font-size: 0.88em; white-space: normal; }
tr.claim-holds td.verdict, details.claim-holds summary { color: #070; font-weight: bold; }
tr.claim-fails td.verdict, details.claim-fails summary { color: #b00; font-weight: bold; }
tr.claim-inconclusive td.verdict, details.claim-inconclusive summary { color: #a60; font-weight: bold; }
tr.claim-untested td.verdict, details.claim-untested summary { color: #555; font-style: italic; }
details { margin: 0.4em 0; } details ul { margin: 0.3em 0 0.8em; font-size: 0.9em; }
"""


def _main_table(table: Table, number: int) -> str:
    decimals = table.family.decimals
    header = [table.header(c) for c in table.columns] + ["n"]
    if table.has_baseline:
        reference = table.header(table.reference)
        header += ([f"ratio ({reference})"] if table.family.compare == "ratio" else []) + [f"Δ ({reference})"]
    head = "".join(f"<th>{escape(h)}</th>" for h in cells.name_header(table) + header)
    body = []
    for row in table.rows:
        tds = [f"<td>{escape(name)}</td>" for name in cells.names(table, row)]
        for column in table.columns:
            best = ' class="best"' if row.label in table.best(column) else ""
            marker = cells.marker(row, column)
            sup = f'<sup class="sig">{marker}</sup>' if marker else ""
            tds.append(f"<td{best}>{escape(cells.mean_std(row.cells[column], decimals))}{sup}</td>")
        tds.append(f"<td>{cells.seeds(row)}</td>")
        if table.has_baseline:
            tds += [f"<td>{cells.ratio(table, row)}</td>"] if table.family.compare == "ratio" else []
            tds.append(f"<td>{escape(cells.delta(table, row))}</td>")
        classes = (["baseline"] if row.is_baseline else []) + (["block-start"] if table.blocks and
                                                                cells.names(table, row)[0] else [])
        css = f' class="{" ".join(classes)}"' if classes else ""
        body.append(f"<tr{css}>{''.join(tds)}</tr>")
    caption = f"<b>Table {number}.</b> {escape(table.caption())}"
    return (f'<table class="results" id="table-{table.family.key}"><caption>{caption}</caption>'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


def _significance_table(table: Table) -> str:
    note = render_md.significance_note(table)
    if note:
        return f'<p class="note" id="significance-{table.family.key}">Significance: {escape(note)}</p>'
    rows = [row for row in table.rows if row.comparisons]
    if not rows or not table.n_tested():
        return ""
    names = ["grid point", "variant"] if table.blocks else ["variant"]
    head = "".join(f"<th>{escape(h)}</th>" for h in names + [table.header(c) for c in table.columns])
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(name)}</td>" for name in cells.compared_names(table, row)) + "".join(
            f"<td>{escape(cells.significance(row.comparisons.get(c), table.family.decimals))}</td>"
            for c in table.columns)
        + "</tr>" for row in rows)
    caption = (f"Against the baseline ({escape(render_md.baselines(table))}): difference of means, "
               "Holm-corrected p-value, Cohen's d, the test and the seeds it used.")
    return (f'<table class="significance" id="significance-{table.family.key}"><caption>{caption}</caption>'
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


def _figure(plot) -> str:
    data = base64.b64encode(plot.path.read_bytes()).decode("ascii")
    return (f'<figure id="plot-{escape(plot.name)}"><img alt="{escape(plot.title)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{escape(plot.caption)}{_vector_link(plot)}</figcaption></figure>")


def _vector_link(plot) -> str:
    """The SVG beside the PNG (plots/ next to report.html), for papers."""
    return f' <a href="plots/{escape(plot.vector.name)}">SVG</a>' if plot.vector else ""


def _code(text: str) -> str:
    """Escaped, with `command` spans as <code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escape(text))


def _header(document: ReportDocument, title: str) -> list[str]:
    parts = [f"<h1>{escape(report_title(document))}</h1>"]
    if document.description:
        parts.append(f"<p>{escape(document.description.strip())}</p>")
    parts.append(f'<p class="meta">{escape(document.counts())}. From the MLflow store '
                 f"<code>{escape(document.tracking_uri)}</code> (experiment {escape(document.experiment_id)}).</p>")
    setup = document.setup()
    if setup:
        parts.append('<p class="meta">Setup:</p><ul class="meta setup">'
                     + "".join(f"<li>{escape(k)}: {escape(v)}</li>" for k, v in setup) + "</ul>")
    return parts


def _provenance(document: ReportDocument, title: str) -> list[str]:
    facts = document.provenance()
    return [f'<h2>{escape(title)}</h2><ul class="meta provenance">'
            + "".join(f"<li>{escape(k)}: <code>{escape(v)}</code></li>" for k, v in facts) + "</ul>"]


def _headline(document: ReportDocument, title: str) -> list[str]:
    """Table 1 (the headline family's), or why there is none."""
    if not document.tables:
        return [f"<p>{escape(document.no_tables_text())}</p>"]
    return _numbered(document, "headline")


def _numbered(document: ReportDocument, section: str) -> list[str]:
    """The section's tables (ReportDocument.numbered_tables), each with its title, CSV link and significance."""
    parts = []
    for number, table in document.numbered_tables(section):
        parts += [f"<h2>{escape(table.family.title)}</h2>", _main_table(table, number),
                  (f'<p class="note">Every number behind the table: <a href="table_{table.family.key}.csv">'
                  f"table_{table.family.key}.csv</a></p>"), _significance_table(table)]
    return parts


def _best_points(document: ReportDocument, title: str) -> list[str]:
    best = document.best_points
    assert best is not None, "the section is shown only when the document has them (outline.SECTIONS)"
    head = "".join(f"<th>{escape(h)}</th>" for h in best.header)
    body = "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in line) + "</tr>" for line in best.body)
    return [(f'<h2>{escape(title)}</h2><table class="results" id="best-grid-point"><caption>'
            f"{escape(best.caption)}</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")]


def _plots(document: ReportDocument, title: str) -> list[str]:
    return [f"<h2>{escape(title)}</h2>"] + [_figure(plot) for plot in document.plots]


def _grid_html(header: list[str], body: list[list[str]], css_id: str, caption: str = "") -> str:
    head = "".join(f"<th>{escape(cell)}</th>" for cell in header)
    rows = "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in line) + "</tr>" for line in body)
    caption = f"<caption>{escape(caption)}</caption>" if caption else ""
    return f'<table class="results" id="{css_id}">{caption}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


def _published(document: ReportDocument, title: str) -> list[str]:
    from .published import CAPTION, HEADER

    table = (_grid_html(HEADER, [line.texts() for line in document.published], "published-values", CAPTION)
             if document.published else "")
    notes = "".join(f"<p>{escape(note)}</p>" for note in document.published_notes)
    return [f"<h2>{escape(title)}</h2>" + table + notes]


def _cost(document: ReportDocument, title: str) -> list[str]:
    front = document.cost
    assert front is not None, "the section is shown only when the document has one (outline.SECTIONS)"
    figure = _figure(front.plot) if front.plot is not None else f"<p>{escape(front.caption())}</p>"
    header, body = front.table()
    return [f"<h2>{escape(title)}</h2>{figure}<p>The rows on the Pareto front, cheapest first:</p>"
            + _grid_html(header, body, "cost-front")]


def _search(document: ReportDocument, title: str) -> list[str]:
    assert document.search is not None, "the section is shown only when the document has one (outline.SECTIONS)"
    return [render_search.html(document.search)]


def _listed(lines: list[str], title: str, css: str = "") -> list[str]:
    return [f"<h2>{escape(title)}</h2><ul>" + "".join(f"<li{css}>{escape(line)}</li>" for line in lines) + "</ul>"]


def _trials(document: ReportDocument, title: str) -> list[str]:
    listing = document.trial_listing().map(escape)
    links, note = document.run_links()
    if "run id" in listing:  # each run id a link to the run's page in MLflow's UI
        listing["run id"] = [f'<a href="{escape(link)}">{run_id}</a>' if link else run_id
                             for run_id, link in zip(listing["run id"], links)]
    return [f"<h2>{escape(title)}</h2>" + (f'<p class="note">{_code(note)}</p>' if note else "") +
            listing.to_html(index=False, classes="trials", border=0, escape=False)]


# Each section of the outline (outline.py) as HTML parts: (document, the section's title) -> parts.
BLOCKS: dict[str, Callable[[ReportDocument, str], list[str]]] = {
    "header": _header,
    "headline": _headline,
    "claims": lambda document, title: [render_claims.html(document.claims)]
    + ([f'<p class="meta">{escape(document.decide_note)}</p>'] if document.decide_note else []),
    "search": _search,
    "tables": lambda document, title: _numbered(document, "tables"),
    "published": _published,
    "cost": _cost,
    "best_points": _best_points,
    "plots": _plots,
    "claim_details": lambda document, title: [render_claims.details_html(document.claims, title)],
    "provenance": _provenance,
    "unfinished": lambda document, title: _listed(document.unfinished(), title, ' class="problem"'),
    "outside": lambda document, title: _listed(document.outside_lines(), title),
    "trials": _trials,
}


_TEXT = re.compile(r">([^<]*)<")
_CODE_SPAN = re.compile(r"`([^`\n]+)`")


def code_spans(html: str) -> str:
    """Markdown's `code` spans left in the text (a note or a caption written once for both renderings) as
    <code>, and a lone backtick dropped, so that the page shows no Markdown; tags and attributes untouched."""
    def text(match: re.Match) -> str:
        return ">" + _CODE_SPAN.sub(r"<code>\1</code>", match.group(1)).replace("`", "") + "<"

    return _TEXT.sub(text, html)


def render(document: ReportDocument) -> str:
    body = "\n".join(part for section in sections(document) for part in BLOCKS[section.key](document, section.title))
    body = code_spans(body)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{escape(report_title(document))}</title><style>{STYLE}</style></head>"
            f"<body>\n{body}\n</body></html>\n")

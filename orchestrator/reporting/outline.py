"""The report's outline, written once: its sections in order, each with its title and when it shows.

render_md, render_html and render_latex each walk `sections(document)` and render every section with their own
block for its key (a format may leave a section out: tables.tex holds only the tables). A section's title is
spelt here alone. Reordering the report is reordering SECTIONS; a new section is one line here and one block
per format (tests/test_report_outline.py checks that every format has a block for every section).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .document import ReportDocument


@dataclass(frozen=True)
class Section:
    """One part of the report. `title`: its heading ("": the section heads itself, e.g. one heading per
    table, or none); `shown`: whether this document has it. A section whose part of the document may be
    absent (search, cost, best_points) shows only when it is there, so its blocks may rely on it."""

    key: str
    title: str = ""
    shown: Callable[[ReportDocument], bool] = lambda document: True


def report_title(document: ReportDocument) -> str:
    """The report's own title (the page's heading and the HTML <title>)."""
    return f"Ablation report: {document.study_name}"


# A paper's order: the result first. The headline table (Table 1, report.metric's family) comes right under a
# short header, so that it shows above the first scroll of a browser window (tests/test_ui.py checks it in
# Chromium); the claims follow it one line each (render_claims), then the other tables; everything a reader
# checks rather than reads (the claims' details, the provenance, the trials) comes after the tables and plots.
SECTIONS: tuple[Section, ...] = (
    Section("header"),  # the title, the description, the counts and the store, the setup
    Section("headline"),  # Table 1, headed by its family's title; a sentence where there is no table
    Section("claims", shown=lambda document: bool(document.claims)),  # headed by render_claims
    Section("search", shown=lambda document: document.search is not None),  # headed by render_search
    Section("tables", shown=lambda document: len(document.tables) > 1),  # the other families' tables, each headed
    Section("published", "Published values beside ours",
            lambda document: bool(document.published or document.published_notes)),
    Section("cost", "Cost and quality", lambda document: document.cost is not None),
    Section("best_points", "Best grid point per variant", lambda document: bool(document.best_points)),
    Section("plots", "Plots", lambda document: bool(document.plots)),
    Section("claim_details", "Claims in detail", lambda document: bool(document.claims)),  # each claim's checks
    Section("provenance", "Provenance", lambda document: bool(document.provenance())),
    Section("unfinished", "Trials not finished", lambda document: bool(document.unfinished())),
    Section("outside", "Runs this study file no longer defines (left out of the tables)",
            lambda document: bool(document.outside_lines())),
    Section("trials", "Trials"),
)


def sections(document: ReportDocument) -> list[Section]:
    """The sections this document shows, in the report's order."""
    return [section for section in SECTIONS if section.shown(document)]

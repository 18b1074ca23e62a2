"""The report's outline is written once (reporting/outline.py): every format renders each of its sections, the
section titles are spelt there alone, and reordering SECTIONS reorders report.md and report.html."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from orchestrator.reporting import outline, render_html, render_latex, render_md
from orchestrator.reporting.document import ReportDocument

REPORTING = Path(__file__).resolve().parent.parent / "orchestrator" / "reporting"


def _document() -> ReportDocument:
    trials = pd.DataFrame({"label": ["Kerple", "DAPE"], "seed": [0, 0], "status": ["FINISHED", "SCHEDULED"],
                           "run_name": ["Kerple · s0", None], "run_id": ["0123456789abcdef0123456789abcdef", None],
                           "trial_id": ["aaaa", "bbbb"]})
    outside = pd.DataFrame({"run_name": ["Old · s0"], "status": ["FINISHED"], "trial_id": ["cccc"]})
    return ReportDocument(study_name="outlined", description="", tracking_uri="file:///tmp/nowhere", experiment_id="7",
                          value_text="final value", trials=trials, outside=outside)


def test_every_format_renders_every_section():
    keys = {section.key for section in outline.SECTIONS}
    assert len(keys) == len(outline.SECTIONS)
    assert set(render_md.BLOCKS) == keys and set(render_html.BLOCKS) == keys
    assert set(render_latex.BLOCKS) | render_latex.LEFT_OUT == keys
    assert not set(render_latex.BLOCKS) & render_latex.LEFT_OUT


def test_section_titles_are_spelt_in_the_outline_alone():
    titles = [section.title for section in outline.SECTIONS if section.title]
    assert len(titles) >= 5
    for renderer in ("render_md.py", "render_html.py", "render_latex.py"):
        text = (REPORTING / renderer).read_text()
        spelt = [title for title in titles
                 if any(form in text for form in (f"## {title}", f"<h2>{title}", f'"{title}"'))]
        assert spelt == [], renderer


def test_reordering_the_outline_reorders_the_report(monkeypatch):
    document = _document()
    markdown = render_md.render(document)
    order = ["## Trials not finished", "## Runs this study file no longer defines", "## Trials\n"]
    assert [markdown.index(heading) for heading in order] == sorted(markdown.index(heading) for heading in order)
    monkeypatch.setattr(outline, "SECTIONS", tuple(reversed(outline.SECTIONS)))
    markdown, html = render_md.render(document), render_html.render(document)
    positions = [markdown.index(heading) for heading in order]
    assert positions == sorted(positions, reverse=True)
    assert markdown.index("# Ablation report: outlined") > positions[0]  # the header section last
    html_order = [html.index(f"<h2>{title}")
                  for title in ("Trials not finished", "Runs this study file", "Trials</h2>")]
    assert html_order == sorted(html_order, reverse=True)

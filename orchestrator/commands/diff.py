"""`orchestrator diff STUDY --against REF`: the study's results at the current code against another code
version or another store (reporting/code_diff.py): printed, and written as Markdown beside the report."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape

from .invocation import Invocation
from .output import EXIT_INVALID, console, stop


def diff(invocation: Invocation, *, against: str, reports_dir: Path | None) -> None:
    from ..reporting.code_diff import DiffRefused, compare_sides, diff_file_name, render_markdown, resolve_sides

    store = invocation.stored_or_exit("No results")
    try:
        current, other = resolve_sides(invocation.study, store, against)
    except DiffRefused as error:
        stop(f"[red]Cannot diff:[/red] {escape(str(error))}", EXIT_INVALID)
    text = render_markdown(compare_sides(invocation.study, current, other))
    folder = invocation.writable_reports(reports_dir) / invocation.study.name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / diff_file_name(against)
    path.write_text(text, encoding="utf-8")
    console.print(text, markup=False)
    console.print(f"Diff: {path}")

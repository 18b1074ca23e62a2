"""Cell texts shared by the Markdown, HTML and LaTeX renderers (each adds its own emphasis)."""

from __future__ import annotations

import math

from .stats import Comparison, N_TOO_SMALL, Summary, format_p
from .tables import Row, Table

DASH = "–"


def number(value: float, decimals: int) -> str:
    return DASH if value is None or math.isnan(value) else f"{value:.{decimals}f}"


def mean_std(cell: Summary, decimals: int, pm: str = " ± ") -> str:
    if cell.n == 0:
        return DASH
    if cell.n == 1 or math.isnan(cell.std):
        return number(cell.mean, decimals)
    return f"{number(cell.mean, decimals)}{pm}{number(cell.std, decimals)}"


def seeds(row: Row) -> str:
    return f"{row.seeds_done}/{row.seeds_expected}"


def ratio(table: Table, row: Row) -> str:
    if row.is_baseline or row.baseline_label is None:
        return "1" if row.is_baseline and table.has_baseline else DASH
    return number(row.ratio(table.reference, table.row(row.baseline_label)), 3)


def delta(table: Table, row: Row) -> str:
    if row.baseline_label is None:
        return DASH
    value = table.display_delta(row)
    if math.isnan(value):
        return DASH
    if table.family.compare == "ratio":
        return f"{value:+.1f}%"
    return f"{value:+.{table.family.decimals}f}"


def significance(comparison: Comparison | None, decimals: int) -> str:
    """The significance table's cell: difference, corrected p, effect size and which test."""
    if comparison is None:
        return DASH
    diff = number(comparison.diff, decimals)
    if comparison.test == N_TOO_SMALL:
        return f"Δ {diff}; n < 3"
    if not comparison.tested:
        return f"Δ {diff}; {comparison.test}"
    return (f"Δ {diff}; {format_p(comparison.p_holm)}{comparison.marker}; d = {comparison.effect:.2f} "
            f"({comparison.test}, n = {comparison.n})")


def marker(row: Row, column: str) -> str:
    """Significance stars for the main table (untested cells get none; the significance table says why)."""
    comparison = row.comparisons.get(column)
    return comparison.marker if comparison else ""


def compared_label(table: Table, row: Row) -> str:
    """The row's label, naming its baseline when rows have different ones (a grid: one per grid point)."""
    return row.label + (f" vs {row.baseline_label}" if len(table.baseline_names) > 1 else "")

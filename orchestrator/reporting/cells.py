"""Cell texts shared by the Markdown, HTML and LaTeX renderers (each adds its own emphasis)."""

from __future__ import annotations

import math

from ..judging.stats import N_TOO_SMALL, Comparison, Summary, format_p
from .tables import Row, Table

DASH = "–"


def number(value: float, decimals: int) -> str:
    """Fixed decimals; a value that rounds to zero is "0.000", never "-0.000"."""
    if value is None or math.isnan(value):
        return DASH
    text = f"{value:.{decimals}f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.") else text


def mean_std(cell: Summary, decimals: int, pm: str = " ± ") -> str:
    if cell.n == 0:
        return DASH
    if cell.diverged:
        return diverged(cell)
    if cell.n == 1 or math.isnan(cell.std):
        return number(cell.mean, decimals)
    return f"{number(cell.mean, decimals)}{pm}{number(cell.std, decimals)}"


def diverged(cell: Summary) -> str:
    """A cell with a diverged seed (judging/diverged.py): no mean is computed on it."""
    return f"diverged ({cell.diverged} of {cell.n} seeds)"


def seeds(row: Row) -> str:
    return f"{row.seeds_done}/{row.seeds_expected}{row.code_mark}"


RATIO_DECIMALS = 3


def ratio(table: Table, row: Row) -> str:
    """The row's mean over its baseline's; a baseline row's own ratio is 1 (printed like the others)."""
    if row.is_baseline or row.baseline_label is None:
        return number(1.0, RATIO_DECIMALS) if row.is_baseline and table.has_baseline else DASH
    return number(row.ratio(table.reference, table.row(row.baseline_label)), RATIO_DECIMALS)


def delta(table: Table, row: Row) -> str:
    if row.baseline_label is None:
        return DASH
    value = table.display_delta(row)
    if math.isnan(value):
        return DASH
    if table.family.compare == "ratio":
        return f"{signed(value, 1)}%"
    return signed(value, table.family.decimals)


def signed(value: float, decimals: int) -> str:
    """"+1.2", "-0.5"; a change that rounds to zero is "0.0" (no sign)."""
    text = number(value, decimals)
    return text if text == DASH or not text.strip("-0.") or text.startswith("-") else f"+{text}"


def significance(comparison: Comparison | None, decimals: int) -> str:
    """The significance table's cell: difference, corrected p, effect size and which test."""
    if comparison is None:
        return DASH
    diff = number(comparison.diff, decimals)
    if comparison.test == N_TOO_SMALL:
        return f"Δ {diff}; not tested (n = {comparison.n} < 3 seeds)"
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


def name_header(table: Table) -> list[str]:
    """The row-name columns: the grid point and the variant for a study read in blocks, else the row."""
    return ["grid point", "variant"] if table.blocks else ["variant"]


def names(table: Table, row: Row) -> list[str]:
    """A row's name cells: its grid point (on the first row of its block only) and its variant; else its label."""
    if not table.blocks:
        return [row.label]
    return [row.block if table.first_in_block(row.block) is row else "", row.variant]


def compared_names(table: Table, row: Row) -> list[str]:
    """Name cells of a significance row: as `names`, with the baseline it is compared with."""
    if table.blocks:
        base = table.row(row.baseline_label)
        return [row.block, f"{row.variant} vs {base.variant if base else row.baseline_label}"]
    return [compared_label(table, row)]

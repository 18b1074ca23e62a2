"""Paper-style tables: rows = the study's rows (variants), columns = one metric family's columns, cells =
mean ± std over seeds, the best per column marked, the metric against the baseline row, significance."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from ..tracking.store import SWEPT_TAG_PREFIX
from .metrics import Family, headline_first
from .stats import MIN_SEEDS, Comparison, Summary, apply_holm, compare, summarise


@dataclass
class Row:
    label: str
    is_baseline: bool
    baseline_label: str | None  # the row this one is compared with
    seeds_done: int
    seeds_expected: int
    cells: dict[str, Summary]
    comparisons: dict[str, Comparison] = field(default_factory=dict)

    def ratio(self, column: str, baseline: "Row | None") -> float:
        if baseline is None or not baseline.cells[column].mean:
            return math.nan
        return self.cells[column].mean / baseline.cells[column].mean

    def delta(self, column: str, baseline: "Row | None") -> float:
        return math.nan if baseline is None else self.cells[column].mean - baseline.cells[column].mean


@dataclass
class Table:
    family: Family
    columns: list[str]
    rows: list[Row]
    value_text: str  # which value of each run's metric the cells show
    tail_text: str = ""

    @property
    def reference(self) -> str:
        return self.family.reference(self.columns)

    def header(self, column: str) -> str:
        return self.family.header(column)

    def row(self, label: str | None) -> Row | None:
        return next((row for row in self.rows if row.label == label), None)

    @property
    def has_baseline(self) -> bool:
        return any(row.baseline_label for row in self.rows)

    @property
    def baseline_names(self) -> list[str]:
        return list(dict.fromkeys(row.baseline_label for row in self.rows if row.baseline_label))

    def best(self, column: str) -> set[str]:
        means = {row.label: row.cells[column].mean for row in self.rows if row.cells[column].n}
        if not means:
            return set()
        target = min(means.values()) if self.family.lower_is_better else max(means.values())
        return {label for label, mean in means.items() if mean == target}

    def comparisons(self) -> list[Comparison]:
        return [c for row in self.rows for c in row.comparisons.values()]

    def n_tested(self) -> int:
        return sum(c.tested for c in self.comparisons())

    def caption(self) -> str:
        family = self.family
        parts = [family.description + self.tail_text, f"Cells: {self.value_text}, mean ± std over seeds; "
                 f"n = finished seeds / seeds in the study. Best per column in bold."]
        if self.has_baseline:
            reference = self.header(self.reference)
            if family.compare == "ratio":
                parts.append(f"ratio: the row's mean over the baseline's at {reference}; "
                             f"Δ: the same as a relative change.")
            else:
                parts.append(f"Δ: the row's mean minus the baseline's at {reference}.")
            names = ", ".join(self.baseline_names)
            if family.significance:
                parts.append(
                    f"Markers: difference from the baseline ({names}) by a paired t-test over matching seeds "
                    f"(Welch's t-test where fewer than {MIN_SEEDS} seeds match), p-values Holm-corrected over the "
                    f"{self.n_tested()} comparison(s) of this table: * p < 0.05, ** p < 0.01, *** p < 0.001; "
                    f"rows with fewer than {MIN_SEEDS} seeds are not tested (n < 3).")
        return " ".join(parts)

    def display_delta(self, row: Row) -> float:
        """The Δ column: relative change for ratio families (a paper's "+3.2%"), plain difference otherwise."""
        baseline = self.row(row.baseline_label)
        if self.family.compare == "ratio":
            return (row.ratio(self.reference, baseline) - 1) * 100
        return row.delta(self.reference, baseline)

    def to_frame(self) -> pd.DataFrame:
        """Long form for CSV: one line per row and column with every number behind the cell."""
        records = []
        for row in self.rows:
            baseline = self.row(row.baseline_label)
            best = {column: row.label in self.best(column) for column in self.columns}
            for column in self.columns:
                cell, comparison = row.cells[column], row.comparisons.get(column)
                records.append({
                    "table": self.family.key, "variant": row.label, "column": column, "header": self.header(column),
                    "mean": cell.mean, "std": cell.std, "n": cell.n, "seeds_expected": row.seeds_expected,
                    "best": best[column], "baseline": row.baseline_label,
                    "ratio_to_baseline": row.ratio(column, baseline), "diff_to_baseline": row.delta(column, baseline),
                    "test": comparison.test if comparison else "", "p": comparison.p if comparison else math.nan,
                    "p_holm": comparison.p_holm if comparison else math.nan,
                    "cohens_d": comparison.effect if comparison else math.nan,
                    "marker": comparison.marker if comparison else "",
                })
        return pd.DataFrame.from_records(records)


def baseline_rows(frame: pd.DataFrame, axis_keys: list[str]) -> dict[str, str | None]:
    """Each row's baseline: the baseline variant's row at the same grid point (the only baseline row when
    the study has no axes). Baseline rows themselves, and studies without a baseline, map to None."""
    rows = frame.drop_duplicates("label")
    baselines = rows[rows["baseline"]]
    if len(baselines) == len(rows):  # no baseline marked (every cell is its own base)
        return {label: None for label in rows["label"]}

    def point(row) -> tuple:
        return tuple(str(row.get(f"{SWEPT_TAG_PREFIX}{key}")) for key in axis_keys)

    by_point = {point(row): row["label"] for _, row in baselines.iterrows()}
    return {row["label"]: None if row["baseline"] else by_point.get(point(row)) for _, row in rows.iterrows()}


def build_table(family: Family, frame: pd.DataFrame, axis_keys: list[str], value_text: str,
                tail_text: str = "") -> Table | None:
    """`frame`: every in-study trial (any status); only FINISHED ones enter the numbers."""
    finished = frame[frame["status"] == "FINISHED"]
    columns = family.columns(finished)
    if not columns:
        return None
    order = frame.sort_values("row_index").drop_duplicates("label")
    compare_with = baseline_rows(order, axis_keys)
    rows = []
    for _, info in order.iterrows():
        label = info["label"]
        mine = finished[finished["label"] == label].set_index("seed")
        rows.append(Row(label=label, is_baseline=bool(info["baseline"]), baseline_label=compare_with[label],
                        seeds_done=len(mine), seeds_expected=int((frame["label"] == label).sum()),
                        cells={column: summarise(mine[column]) for column in columns}))
    table = Table(family, columns, rows, value_text, tail_text)
    if family.significance:
        for row in rows:
            base = table.row(row.baseline_label)
            if base is None:
                continue
            theirs = finished[finished["label"] == base.label].set_index("seed")
            mine = finished[finished["label"] == row.label].set_index("seed")
            row.comparisons = {column: compare(mine[column], theirs[column]) for column in columns}
        apply_holm(table.comparisons())
    return table


def build_tables(frame: pd.DataFrame, axis_keys: list[str], value_text: str, tail_text: str = "",
                 headline: str = "ppl") -> list[Table]:
    """One table per metric family the trials logged, the `headline` family (report.metric) first."""
    tables = []
    for family in headline_first(headline):
        table = build_table(family, frame, axis_keys, value_text, tail_text if family.by_length else "")
        if table is not None:
            tables.append(table)
    return tables

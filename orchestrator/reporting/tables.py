"""Paper-style tables: rows = the study's rows (variants), columns = one metric family's columns, cells =
mean ± std over seeds, the best per column marked, the metric against the baseline row, significance."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..judging.stats import MIN_SEEDS, Comparison, Summary, apply_holm, compare_arrays, summarise_array
from ..study.metric_families import PPL
from .families import Family, headline_first


@dataclass
class Row:
    label: str
    is_baseline: bool
    baseline_label: str | None  # the row this one is compared with
    seeds_done: int
    seeds_expected: int
    cells: dict[str, Summary]
    comparisons: dict[str, Comparison] = field(default_factory=dict)
    block: str = ""  # the grid point of a study read in blocks (layout.py), else ""
    variant: str = ""
    code_mark: str = ""  # CODE_MARK where some of its trials ran other code than most of the table's

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
    left_out: list[str] = field(default_factory=list)  # columns 0 by definition in every run (Family.zero_reason)
    _by_label: dict = field(default_factory=dict, repr=False, compare=False)
    _best: dict = field(default_factory=dict, repr=False, compare=False)
    _blocks: tuple | None = field(default=None, repr=False, compare=False)
    _firsts: tuple | None = field(default=None, repr=False, compare=False)

    @property
    def reference(self) -> str:
        return self.family.reference(self.columns)

    def header(self, column: str) -> str:
        return self.family.header(column)

    def row(self, label: str | None) -> Row | None:
        if self._by_label.get(None) != len(self.rows):  # rows are set once; indexed at the first look-up
            self._by_label = {None: len(self.rows)}
            for row in self.rows:
                self._by_label.setdefault(row.label, row)
        return self._by_label.get(label) if label is not None else None

    def first_in_block(self, block: str) -> Row | None:
        """The first row of a block (the one a table names the grid point on); indexed once, as `row`: a
        renderer asks for every row, and a scan each time grew with the square of the rows."""
        if self._firsts is None or self._firsts[0] != len(self.rows):
            firsts: dict[str, Row] = {}
            for row in self.rows:
                firsts.setdefault(row.block, row)
            self._firsts = (len(self.rows), firsts)
        return self._firsts[1].get(block)

    @property
    def has_baseline(self) -> bool:
        return any(row.baseline_label for row in self.rows)

    @property
    def baseline_names(self) -> list[str]:
        return list(dict.fromkeys(row.baseline_label for row in self.rows if row.baseline_label))

    @property
    def blocks(self) -> list[str]:
        """The grid points the rows are grouped by (one block each), or [] for a study read row by row."""
        if self._blocks is None or self._blocks[0] != len(self.rows):
            names = list(dict.fromkeys(row.block for row in self.rows))
            self._blocks = (len(self.rows), names if len(names) > 1 or (names and names[0]) else [])
        return self._blocks[1]

    def best(self, column: str) -> set[str]:
        """The best rows of a column, within each block: none where fewer than two rows have a value or
        all of them tie (ΔP at the training length is 0 by definition in every row). Computed once per column
        (every renderer asks for every cell)."""
        if column not in self._best:
            self._best[column] = self._find_best(column)
        return self._best[column]

    def _find_best(self, column: str) -> set[str]:
        by_block: dict[str, dict[str, float]] = {}
        for row in self.rows:
            if row.cells[column].n and not row.cells[column].diverged:  # a diverged cell has no mean
                by_block.setdefault(row.block if self.blocks else "", {})[row.label] = round(
                    row.cells[column].mean, self.family.decimals)
        best: set[str] = set()
        for means in by_block.values():
            if len(means) < 2 or len(set(means.values())) == 1:
                continue
            target = min(means.values()) if self.family.lower_is_better else max(means.values())
            best |= {label for label, mean in means.items() if mean == target}
        return best

    def comparisons(self) -> list[Comparison]:
        return [c for row in self.rows for c in row.comparisons.values()]

    def n_tested(self) -> int:
        return sum(c.tested for c in self.comparisons())

    def untested_reason(self) -> str:
        """Why no comparison of this table has a p-value: the seeds that finished, against the 3 a test needs."""
        done = sorted({row.seeds_done for row in self.rows if row.comparisons or row.is_baseline})
        seeds = f"{done[0]}" if len(done) == 1 else f"{done[0]}–{done[-1]}"
        return (f"not tested. A paired t-test (its p-value and Cohen's d) needs at least {MIN_SEEDS} finished seeds "
                f"of a row and of its baseline; these rows have {seeds}. Run the study again with --decide (seeds "
                f"added until its claims are decided) or with more seeds (e.g. seeds: [0, 1, 2]): finished trials "
                f"are kept, only the new seeds run.")

    def caption(self) -> str:
        family = self.family
        best = "Best per column within each block in bold" if self.blocks else "Best per column in bold"
        parts = [family.description + self.tail_text]
        if self.left_out:
            assert family.zero_reason is not None, "only a family with a zero_reason leaves columns out (table())"
            parts.append(family.zero_reason.format(columns=", ".join(self.header(c) for c in self.left_out)))
        parts += [f"Cells: {self.value_text}, mean ± std over seeds; "
                 f"n = finished seeds / seeds in the study. {best} (none where the rows tie)."]
        if any(cell.diverged for row in self.rows for cell in row.cells.values()):
            parts.append("diverged: a seed's value is infinite or overflowing (a diverged training or a failed "
                         "evaluation); no mean or test is computed on it.")
        if any(row.code_mark for row in self.rows):
            parts.append(f"{CODE_MARK} after n: some of the row's trials were computed by other code than most "
                         "of the table's (the setup's code line names the versions).")
        if self.has_baseline:
            reference = self.header(self.reference)
            if family.compare == "ratio":
                parts.append(f"ratio: the row's mean over its baseline's at {reference}; "
                             f"Δ: the same as a relative change.")
            else:
                parts.append(f"Δ: the row's mean minus its baseline's at {reference}.")
            names = ", ".join(self.baseline_names)
            if self.blocks and len(self.baseline_names) > 1:
                variants = ", ".join(dict.fromkeys(row.variant for row in self.rows if row.is_baseline))
                names = f"the {variants} row of each grid point"
            if family.significance and self.n_tested():
                parts.append(
                    f"Markers: difference from the baseline ({names}) by a paired t-test over matching seeds "
                    f"(Welch's t-test where fewer than {MIN_SEEDS} seeds match), p-values Holm-corrected over the "
                    f"{self.n_tested()} comparison(s) of this table: * p < 0.05, ** p < 0.01, *** p < 0.001; "
                    f"rows with fewer than {MIN_SEEDS} seeds are not tested (n < 3).")
            else:  # untested: the report says why below the table
                parts.append(f"Baseline: {names}.")
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
                    "mean": cell.mean, "std": cell.std, "n": cell.n, "diverged": cell.diverged,
                    "seeds_expected": row.seeds_expected,
                    "best": best[column], "baseline": row.baseline_label,
                    "ratio_to_baseline": row.ratio(column, baseline), "diff_to_baseline": row.delta(column, baseline),
                    "test": comparison.test if comparison else "", "p": comparison.p if comparison else math.nan,
                    "p_holm": comparison.p_holm if comparison else math.nan,
                    "cohens_d": comparison.effect if comparison else math.nan,
                    "marker": comparison.marker if comparison else "",
                })
        return pd.DataFrame.from_records(records)


def _compared_with(order: pd.DataFrame) -> dict[str, str | None]:
    """Each row's baseline row: the frame's `compare_with` (from the study file, layout.py); for a frame
    without it (runs read from the store alone), the only baseline row, if there is exactly one."""
    if "compare_with" in order and order["compare_with"].notna().any():
        return {row["label"]: (row["compare_with"] if isinstance(row["compare_with"], str) else None)
                for _, row in order.iterrows()}
    baselines = list(order.loc[order["baseline"].astype(bool), "label"])
    only = baselines[0] if len(baselines) == 1 and len(order) > 1 else None
    return {label: None if label == only else only for label in order["label"]}


_NONE = np.array([], dtype=int)


class _RunsByRow:
    """The finished trials' values of some columns, found by row label without selecting the frame again:
    one grouping, then each row's seeds and values by position."""

    def __init__(self, finished: pd.DataFrame, columns: list[str]):
        self.positions = finished.groupby("label", sort=False).indices
        self.seeds = finished["seed"].to_numpy()
        self.columns = {column: finished[column].to_numpy(dtype=float) for column in columns}

    def count(self, label: str) -> int:
        return len(self.positions.get(label, ()))

    def values(self, label: str, column: str) -> np.ndarray:
        """One metric's values of a row (NaN: not logged), in the order of `seeds`."""
        return self.columns[column][self.positions.get(label, _NONE)]

    def seeds_of(self, label: str) -> np.ndarray:
        return self.seeds[self.positions.get(label, _NONE)]


def build_table(family: Family, frame: pd.DataFrame, value_text: str, tail_text: str = "") -> Table | None:
    """`frame`: every in-study trial (any status); only FINISHED ones enter the numbers. The trials are
    grouped by row once (not selected row by row: a study has hundreds of rows)."""
    finished = frame[frame["status"] == "FINISHED"]
    columns = family.columns(finished)
    left_out = [c for c in columns if family.zero_reason and (finished[c].dropna() == 0).all()]
    columns = [c for c in columns if c not in left_out]
    if not columns:
        return None
    order = frame.sort_values("row_index").drop_duplicates("label")
    compare_with = _compared_with(order)
    expected = frame["label"].value_counts()
    runs = _RunsByRow(finished, columns)
    rows = []
    for info in order[["label", "baseline"] + [c for c in ("block", "variant") if c in order]].to_dict("records"):
        label = info["label"]
        block = info.get("block") if isinstance(info.get("block"), str) else ""
        rows.append(Row(label=label, is_baseline=bool(info["baseline"]), baseline_label=compare_with[label],
                        seeds_done=runs.count(label), seeds_expected=int(expected[label]),
                        cells={column: summarise_array(runs.values(label, column)) for column in columns}, block=block,
                        variant=str(info.get("variant") or label)))
    _mark_code(rows, finished)
    table = Table(family, columns, rows, value_text, tail_text, left_out)
    if family.significance:
        for row in rows:
            base = table.row(row.baseline_label)
            if base is None:
                continue
            mine, theirs = runs.seeds_of(row.label), runs.seeds_of(base.label)
            row.comparisons = {column: compare_arrays(runs.values(row.label, column), mine,
                                                      runs.values(base.label, column), theirs) for column in columns}
        apply_holm(table.comparisons())
    return table


CODE_MARK = "‡"


def _mark_code(rows: list[Row], finished: pd.DataFrame) -> None:
    """Mark the rows some of whose finished trials ran other code than most of them (a report kept with
    `run --keep-stale`, or mixing trials of unknown code): a table never mixes code versions silently."""
    if "code_fingerprint" not in finished or finished.empty:
        return
    codes = finished["code_fingerprint"].fillna("unknown")
    counts = codes.value_counts()
    if len(counts) <= 1:
        return
    other = set(finished.loc[codes != counts.index[0], "label"])
    for row in rows:
        if row.label in other:
            row.code_mark = CODE_MARK


def build_tables(frame: pd.DataFrame, value_text: str, tail_text: str = "", headline: str = PPL.name) -> list[Table]:
    """One table per metric family the trials logged, the `headline` family (report.metric) first."""
    tables = []
    for family in headline_first(headline):
        table = build_table(family, frame, value_text, tail_text if family.by_length else "")
        if table is not None:
            tables.append(table)
    return tables

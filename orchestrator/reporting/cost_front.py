"""The report's cost front: quality against cost, one point per row (mean over its seeds, with the seeds'
spread as error bars), the rows no other row beats on both marked as the Pareto front (pareto.py), and a table
of the rows on it. DAPE's trade is extrapolation bought with attention compute; this is that trade in one
picture.

- Quality: the headline metric family's reference column (the longest evaluation length of a by-length
  family, `che_acc_test` for CHE accuracy), from the first table that is not the time table.
- Cost, one source for every point (a figure never mixes protocols): the isolated ms per step of
  `orchestrator evaluate --time` where every plotted row has it, else the training's ms per step, else the
  analytic GFLOPs per training step of the plan (planning/estimate.py). The caption names the source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

import dape_core.metric_names as names

from ..study import Study
from ..study.metric_families import ACCURACY, TIME
from .pareto import pareto_mask
from .plots import Plot, headless, save_figure
from .tables import Table

_ISOLATED = names.isolated(names.MS_PER_STEP)
GFLOPS = "GFLOPs per step (plan)"


@dataclass
class CostPoint:
    label: str
    quality: float
    quality_std: float
    cost: float
    cost_std: float
    seeds: int
    on_front: bool = False


@dataclass
class CostFront:
    quality_column: str  # the metric column of the quality axis (ppl_8192, che_acc_test, ...)
    quality_header: str  # its header in the report ("ppl L=8192")
    lower_is_better: bool
    cost_name: str  # the cost axis: isolated ms per step, ms per step (during training), GFLOPs per step (plan)
    cost_note: str
    points: list[CostPoint] = field(default_factory=list)
    plot: Plot | None = None

    @property
    def front(self) -> list[CostPoint]:
        """The rows on the front, cheapest first."""
        return sorted((point for point in self.points if point.on_front), key=lambda point: point.cost)

    def caption(self) -> str:
        direction = "lower" if self.lower_is_better else "higher"
        return (f"Quality ({self.quality_header}, {direction} is better) against cost, {self.cost_name}: one point "
                f"per row, the mean over its seeds, error bars ± one std over the seeds where a row has several. "
                f"The rows no other row beats on both (at most as costly and at least as good, better in one) are the "
                f"Pareto front, drawn as filled points joined by a line. {self.cost_note}")

    def table(self) -> tuple[list[str], list[list[str]]]:
        header = ["row", self.quality_header, self.cost_name, "n"]
        body = [[point.label, _pm(point.quality, point.quality_std, 3), _pm(point.cost, point.cost_std, 2),
                 str(point.seeds)] for point in self.front]
        return header, body


def _pm(mean: float, std: float, decimals: int) -> str:
    return f"{mean:.{decimals}f}" + (f" ± {std:.{decimals}f}" if math.isfinite(std) and std > 0 else "")


def _quality_table(tables: list[Table]) -> tuple[Table, str] | None:
    for table in tables:
        if table.family.declared is TIME or not table.columns:
            continue
        if table.family.declared is ACCURACY and names.CHE_ACC_TEST in table.columns:
            return table, names.CHE_ACC_TEST
        return table, table.family.reference(table.columns)
    return None


def _cost_source(finished: pd.DataFrame, labels: list[str]) -> tuple[str | None, str, str]:
    """(column, axis name, note) of the cost every row has: isolated ms, else training ms, else None (FLOPs)."""
    rows = finished[finished["label"].isin(labels)]
    for column, name, note in (
            (_ISOLATED, "isolated ms per step", "Cost: `orchestrator evaluate --time`'s isolated timing (one stored "
             "model at a time, nothing else on the device)."),
            (names.MS_PER_STEP, "ms per step (during training)", "Cost: the training's own timing of its steps; "
             "trials sharing the device while they were timed make it noisier (the time table's caption says how "
             "many); `orchestrator evaluate --time` times them alone.")):
        if column in rows and rows.groupby("label")[column].apply(lambda v: v.notna().any()).reindex(labels).all():
            return column, name, note
    return None, GFLOPS, ("Cost: no timing covers every row, so the analytic FLOPs of one training step "
                          "(orchestrator plan's estimate) stand for it.")


def _flops_by_label(study: Study) -> dict[str, float]:
    from ..planning.estimate import estimate
    from ..study.trial_checks import resolved_rows

    try:
        rows = resolved_rows(study)
    except ValueError:
        return {}
    return {row.cell.label: estimate(row.config, study.resources.gpus, study.resources.cpus).flops_per_step / 1e9
            for row in rows if row.cell is not None}


def cost_front(study: Study, tables: list[Table], trials: pd.DataFrame, folder: Path | None) -> CostFront | None:
    """The cost front of the finished rows, drawn into `folder` (None: not drawn); None where there is no
    quality column or fewer than two rows have one."""
    found = _quality_table(tables)
    if found is None or "status" not in trials:
        return None
    table, column = found
    rows = [row for row in table.rows if column in row.cells and math.isfinite(row.cells[column].mean)]
    if len(rows) < 2:
        return None
    finished = trials[trials["status"] == "FINISHED"]
    labels = [row.label for row in rows]
    cost_column, cost_name, note = _cost_source(finished, labels)
    flops = _flops_by_label(study) if cost_column is None else {}
    points = []
    for row in rows:
        summary = row.cells[column]
        if cost_column is None:
            cost, spread = flops.get(row.label, math.nan), 0.0
        else:
            values = finished.loc[finished["label"] == row.label, cost_column].dropna().to_numpy(dtype=float)
            cost = float(values.mean()) if len(values) else math.nan
            spread = float(values.std(ddof=1)) if len(values) > 1 else math.nan
        points.append(CostPoint(row.label, summary.mean, summary.std, cost, spread, summary.n))
    modes = ("min" if table.family.lower_is_better else "max", "min")
    for point, on in zip(points, pareto_mask([(p.quality, p.cost) for p in points], modes)):
        point.on_front = on
    if not any(point.on_front for point in points):
        return None
    header = f"{table.family.metric} {table.header(column)}" if column != names.CHE_ACC_TEST else column
    front = CostFront(column, header, table.family.lower_is_better, cost_name, note, points)
    if folder is not None:
        front.plot = _draw(front, folder)
    return front


MAX_LABELS = 12  # points named on the figure: all of a small study, else the front's (the table names them)


def _draw(front: CostFront, folder: Path) -> Plot:
    """One scatter per kind of point and one errorbar collection for all: a 240-row study draws in one pass
    (a call per point, and a label per point, cost seconds and overlap into an unreadable cloud)."""
    from matplotlib.figure import Figure

    headless()
    fig = Figure(figsize=(7.0, 4.5))
    ax = fig.subplots(gridspec_kw={"left": 0.11, "right": 0.97, "bottom": 0.12, "top": 0.95})
    points = front.points
    costs = np.array([p.cost for p in points], dtype=float)
    qualities = np.array([p.quality for p in points], dtype=float)
    spread = lambda values: np.nan_to_num(np.array(values, dtype=float), nan=0.0)  # noqa: E731
    ax.errorbar(costs, qualities, xerr=spread([p.cost_std for p in points]),
                yerr=spread([p.quality_std for p in points]), fmt="none", ecolor="0.65", capsize=2, lw=0.8, zorder=2)
    on = np.array([p.on_front for p in points])
    ax.scatter(costs[~on], qualities[~on], s=28, facecolors="white", edgecolors="C0", zorder=3, label="other rows")
    ordered = front.front
    ax.plot([p.cost for p in ordered], [p.quality for p in ordered], "-o", color="C0", ms=6, lw=1, zorder=4,
            label="Pareto front")
    named = points if len(points) <= MAX_LABELS else ordered[:MAX_LABELS]
    for point in named:
        ax.annotate(point.label, (point.cost, point.quality), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xlabel(front.cost_name)
    ax.set_ylabel(front.quality_header + (" (lower is better)" if front.lower_is_better else " (higher is better)"))
    ax.grid(True, alpha=0.3)
    finite = costs[np.isfinite(costs)]
    if len(finite) and finite.min() > 0 and finite.max() / finite.min() > 20:
        ax.set_xscale("log")
    ax.legend(loc="best", fontsize=8)
    path = save_figure(fig, folder, "cost_front", tight=False)
    caption = front.caption() + ("" if len(points) <= MAX_LABELS else
                                 f" Only the front's rows are named ({min(len(ordered), MAX_LABELS)} shown); every "
                                 "row's values are in the results CSV.")
    return Plot("cost_front", "Cost and quality", caption, path, path.with_suffix(".svg"))

"""Views of a grid over two or more axes (6 variants x 10 learning rates x 4 widths), where a table of
hundreds of rows and a panel per grid point no longer show the sweep at a glance:
- heat maps: per variant, the headline metric over the first two axes, at the longest evaluation length
  and at the training length (1x); where the grid has more axes, each cell is the best over them;
- the best grid point of each variant: where its headline metric (at the table's reference column, the
  longest length) is best, and its margin to the baseline at that same grid point.
A sampling search keeps Optuna's views (search.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..study import Study
from ..tracking.store import SWEPT_TAG_PREFIX
from . import cells
from .names import point as point_words
from .names import setting, value
from .plots import MAX_LINES, Frame, Plot, fit_title, save_figure
from .tables import Table

MAX_HEATMAP_VARIANTS = 8  # rows of heat maps (two each) in one figure
ANNOTATE_CELLS = 48  # values written in the cells while there are at most this many


def sweep_axes(study: Study) -> list[str]:
    """The grid's axes with several values, for a grid (not one-at-a-time) of two or more of them."""
    if study.search.sampled or study.one_at_a_time:
        return []
    axes = [key for key, values in study.axes.items() if len(values) > 1]
    return axes if len(axes) >= 2 else []


@dataclass
class BestPoints:
    """The best grid point per variant: header and rows of text, ready for every renderer."""

    caption: str
    header: list[str]
    body: list[list[str]]


def best_points(table: Table) -> BestPoints | None:
    """Per variant, the row (grid point) with the best mean at the table's reference column, and its margin to
    the baseline row of that grid point."""
    column, family = table.reference, table.family
    best: dict = {}
    for row in table.rows:
        cell = row.cells[column]
        if not cell.n or cell.diverged:
            continue
        kept = best.get(row.variant)
        better = kept is None or (cell.mean < kept.cells[column].mean if family.lower_is_better
                                  else cell.mean > kept.cells[column].mean)
        if better:
            best[row.variant] = row
    if not best:
        return None
    header = ["variant", "best grid point", table.header(column), "n", "baseline there",
              "margin" + (" (%)" if family.compare == "ratio" else " (difference)")]
    body = []
    for variant, row in best.items():
        baseline = table.row(row.baseline_label)
        base_cell = baseline.cells[column] if baseline is not None else None
        margin = cells.DASH
        if baseline is not None and base_cell is not None and base_cell.n:
            margin = (f"{cells.signed((row.ratio(column, baseline) - 1) * 100, 1)}%" if family.compare == "ratio"
                      else cells.signed(row.delta(column, baseline), family.decimals))
        body.append([variant, point_words(row.block), cells.mean_std(row.cells[column], family.decimals),
                     cells.seeds(row),
                     "(is the baseline)" if row.is_baseline else
                     (cells.mean_std(base_cell, family.decimals) if base_cell is not None else cells.DASH), margin])
    best_word = "lowest" if family.lower_is_better else "highest"
    caption = (f"Best grid point per variant: the row with the {best_word} mean {family.title.lower()} at "
               f"{table.header(column)} ({table.value_text}, mean ± std over seeds), and its margin to the baseline "
               "at the same grid point (for a ratio: the row's mean over the baseline's, minus 1, in percent).")
    return BestPoints(caption, header, body)


def _length_column(table: Table, finished: pd.DataFrame) -> tuple[str, str] | None:
    """The table's column at the training length (1x), with its header."""
    for key in ("config.model.train_length", "config.train.seq_len"):
        if key in finished and finished[key].notna().any():
            length = finished[key].dropna().iloc[0]
            matches = [c for c in table.columns if c.rsplit("_", 1)[-1] == str(length)]
            if matches:
                return matches[0], table.header(matches[0])
    return None


def heatmaps(study: Study, table: Table, finished: pd.DataFrame, folder: Path) -> Plot | None:
    """One row of heat maps per variant (the first MAX_HEATMAP_VARIANTS): the headline metric over the first two
    axes, at the longest evaluation length and at 1x."""
    axes = sweep_axes(study)
    columns = [(table.reference, table.header(table.reference))]
    at_train = _length_column(table, finished)
    if at_train and at_train[0] != table.reference:
        columns.append(at_train)
    swept = [f"{SWEPT_TAG_PREFIX}{key}" for key in axes]
    if not axes or finished.empty or any(key not in finished for key in swept):
        return None
    (x_key, y_key), rest = swept[:2], swept[2:]
    variants = list(dict.fromkeys(finished.sort_values("row_index")["variant"]))
    shown = variants[:MAX_HEATMAP_VARIANTS]
    x_values, y_values = study.axes[axes[0]], study.axes[axes[1]]
    # Laid out in inches (plots.Frame): one colour bar right of each column, in the gap before the next one.
    # Every map has the same cells, so the axes are named once: under the last line and left of the first
    # column; the other maps have no ticks at all (not hidden ones: ticks are most of a figure's artists).
    bar = 0.12 + 0.15 + 1.0  # gap, bar, its tick labels and name
    frame = Frame(len(shown), len(columns), (1.6 + 0.3 * len(x_values), 0.6 + 0.3 * len(y_values)), left=0.9,
                  bottom=0.95 if len(x_values) > 5 else 0.65, top=0.35, hgap=0.35, wgap=bar + 0.35, right=bar)
    fig, grid = frame.figure()
    lower = table.family.lower_is_better
    for j, (column, header) in enumerate(columns):
        maps = {variant: _grid(finished[finished["variant"] == variant], column, x_key, y_key, rest, x_values,
                               y_values, lower) for variant in shown}
        finite = np.concatenate([m[np.isfinite(m)] for m in maps.values()] or [np.array([])])
        limits = (finite.min(), finite.max()) if finite.size else (0.0, 1.0)
        for i, variant in enumerate(shown):
            ax = grid[i][j]
            image = ax.imshow(maps[variant], cmap="viridis_r" if lower else "viridis", vmin=limits[0], vmax=limits[1],
                              aspect="auto", origin="lower")
            if i == len(shown) - 1:
                ax.set_xticks(range(len(x_values)), [value(axes[0], v) for v in x_values], fontsize=7,
                              rotation=45 if len(x_values) > 5 else 0)
                ax.set_xlabel(setting(axes[0]), fontsize=8)
            else:
                ax.set_xticks([])
            if j == 0:
                ax.set_yticks(range(len(y_values)), [value(axes[1], v) for v in y_values], fontsize=7)
                ax.set_ylabel(setting(axes[1]), fontsize=8)
            else:
                ax.set_yticks([])
            baseline = bool(finished.loc[finished["variant"] == variant, "baseline"].any())
            fit_title(ax, f"{variant}{' (baseline)' if baseline else ''}: {header}", 9)
            if maps[variant].size <= ANNOTATE_CELLS:
                shade = image.cmap(image.norm(maps[variant]))[..., :3] @ [0.299, 0.587, 0.114]  # cell brightness
                for (y, x), cell in np.ndenumerate(maps[variant]):
                    if math.isfinite(cell):  # dark text on bright cells, white on dark ones
                        ax.text(x, y, f"{cell:.4g}", ha="center", va="center", fontsize=6,
                                color="black" if shade[y, x] > 0.5 else "white")
        first, last = grid[0][j].get_position(), grid[-1][j].get_position()
        width = frame.size()[0]
        colour_bar = fig.add_axes((first.x1 + 0.12 / width, last.y0, 0.15 / width, first.y1 - last.y0))
        fig.colorbar(image, cax=colour_bar, label=header)
    name = f"{table.family.key}_heatmaps"
    others = (f"; each cell is the best over {', '.join(setting(k.removeprefix(SWEPT_TAG_PREFIX)) for k in rest)}"
              if rest else "")
    capped = (f" Only the first {len(shown)} of the {len(variants)} variants are drawn; the best-grid-point table "
              "lists them all." if len(variants) > len(shown) else "")
    caption = (f"{table.family.title} over {setting(axes[0])} and {setting(axes[1])}, one row per variant: "
               f"mean over seeds at {' and at '.join(h for _, h in columns)}{others}; one colour scale per column "
               f"({'darker is better' if lower else 'brighter is better'}); blank: no finished run. Plots of the "
               f"metric against one swept value are drawn only while they have at most {MAX_LINES} lines.{capped}")
    path = save_figure(fig, folder, name, tight=False)
    return Plot(name, "Heat maps", caption, path, path.with_suffix(".svg"))


def _grid(rows: pd.DataFrame, column: str, x_key: str, y_key: str, rest: list[str], x_values: list,
          y_values: list, lower: bool) -> np.ndarray:
    """The mean over seeds of `column` at each (y, x) grid point (the best over the `rest` axes); NaN where none."""
    cells_ = np.full((len(y_values), len(x_values)), math.nan)
    if rows.empty:
        return cells_
    means = rows.groupby([x_key, y_key, *rest], dropna=False)[column].mean()
    best = means.groupby(level=[0, 1]).min() if lower else means.groupby(level=[0, 1]).max()
    x_index = {_key(v): i for i, v in enumerate(x_values)}
    y_index = {_key(v): i for i, v in enumerate(y_values)}
    for (x, y), mean in best.items():
        if _key(x) in x_index and _key(y) in y_index:
            cells_[y_index[_key(y)], x_index[_key(x)]] = mean
    return cells_


def _key(raw) -> str:
    return repr(float(raw)) if isinstance(raw, (int, float)) and not isinstance(raw, bool) else str(raw)

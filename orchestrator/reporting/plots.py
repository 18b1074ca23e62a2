"""The report's figures (matplotlib, headless): metric vs evaluation length, metric vs a swept value,
training curves. Each line is one study row: the mean over seeds, with a band of ± one std (several seeds);
the baseline dashed and named so in the legend. Each figure is a PNG (embedded in the HTML) and an SVG beside
it (vector, for papers). Small multiples (one panel per grid point) stop at MAX_PANELS, so that a grid of
hundreds of rows stays readable and quick to draw; the caption says so and points to the numbers of every
grid point (the table's CSV) and to the heat maps (sweeps.py)."""

from __future__ import annotations

import math
import sys
import weakref
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from dape_core import PRESETS

from ..tracking.store import SWEPT_TAG_PREFIX
from .names import assignment, setting
from .names import point as point_words
from .png_file import write_png
from .tables import Table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 110
MAX_PANELS = 8  # small multiples per figure: beyond, they are too small to read (and slow to draw)
MAX_LINES = 12  # lines of one axes in a metric-vs-swept-value plot


@cache
def headless():
    """matplotlib, drawing without a display (servers, CI), imported where a figure is drawn rather than with
    the report's modules: a report kept as it was (fingerprint.py) draws nothing and never loads it. Call it
    before pyplot is imported (Optuna's figures use pyplot)."""
    import matplotlib

    matplotlib.use("Agg")
    return matplotlib


# The layout each figure of `Frame.figure` was made with (a Figure has no field of its own for it); weak, so a
# figure closed and dropped takes its entry with it.
_FRAMES: weakref.WeakKeyDictionary[Figure, Frame] = weakref.WeakKeyDictionary()


@dataclass
class Frame:
    """A figure's layout in inches, fixed before anything is drawn: the axes (`lines` x `columns` panels of
    `panel` inches), the room around them for tick labels, axis names and titles, and the legend's column on
    the right. Laying a figure out by measuring it (tight_layout, a tight crop) costs a drawing pass each; in
    a 240-trial report that was half the figures' time. The margins hold the report's own labels (tick
    labels of a few characters, one-line titles)."""

    lines: int
    columns: int
    panel: tuple[float, float]
    left: float = 0.8
    right: float = 0.25
    bottom: float = 0.6
    top: float = 0.4
    wgap: float = 0.8  # between panels: the next panel's tick labels and axis name
    hgap: float = 0.85  # between lines of panels: x tick labels, axis name, the next title
    title: float = 0.0  # a figure title above the panels (suptitle)
    legend: float = 0.0  # the legend's width, right of the panels

    def size(self) -> tuple[float, float]:
        width = self.left + self.columns * self.panel[0] + (self.columns - 1) * self.wgap + self.right + self.legend
        height = self.bottom + self.lines * self.panel[1] + (self.lines - 1) * self.hgap + self.top + self.title
        return width, height

    def edges(self) -> dict[str, float]:
        """`subplots_adjust`'s fractions (of the figure) for this layout."""
        width, height = self.size()
        return {"left": self.left / width, "right": 1 - (self.right + self.legend) / width,
                "bottom": self.bottom / height, "top": 1 - (self.top + self.title) / height,
                "wspace": self.wgap / self.panel[0], "hspace": self.hgap / self.panel[1]}

    def figure(self, **options):
        """A Figure of this size with its `lines` x `columns` axes placed (always a 2-D array). A Figure of its
        own, not pyplot's: no global figure registry to close, and pyplot's import (most of a second) is left
        to the figures that need it (Optuna's)."""
        headless()
        from matplotlib.figure import Figure

        fig = Figure(figsize=self.size())
        axes = fig.subplots(self.lines, self.columns, squeeze=False, gridspec_kw=self.edges(), **options)
        _FRAMES[fig] = self  # read by _legend_outside
        return fig, axes

    def apply(self, fig) -> None:
        """Resize `fig` to this layout (changed since `figure`), its panels keeping their size in inches."""
        fig.set_size_inches(*self.size())
        fig.axes[0].get_subplotspec().get_gridspec().update(**self.edges())  # the panels' own, not the figure's
        for ax in fig.axes:  # GridSpec.update moves the axes of pyplot's figures only
            ax.set_position(ax.get_subplotspec().get_position(fig))


@dataclass
class Plot:
    name: str  # file stem under plots/
    title: str
    caption: str
    path: Path
    vector: Path | None = None  # the same figure as SVG

    @property
    def files(self) -> list[Path]:
        return [self.path] + ([self.vector] if self.vector and self.vector.is_file() else [])


def fit_title(ax, text: str, fontsize: float) -> None:
    """The axes' title, placed (not moved clear of top ticks: there are none, and that costs a measuring pass)
    and smaller where it would be wider than its panel (a point of several axes), so that it never runs into
    the neighbour's: a character is about 0.6 of the font size wide."""
    inches = ax.get_position().width * ax.figure.get_figwidth()
    fits = inches * 72 / (0.6 * fontsize)
    ax.set_title(text, fontsize=max(6.0, fontsize * min(1.0, fits / max(len(text), 1))), y=1.0)


def _style(ax, text: str, xlabel: str, ylabel: str) -> None:
    fit_title(ax, text, 11)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3, linewidth=0.6)
    ax.spines[["top", "right"]].set_visible(False)


def _save(fig, folder: Path, name: str, tight: bool = False) -> Path:
    """PNG at DPI and the same figure as SVG, each drawn once. The report's own figures are laid out before
    they are drawn (Frame); `tight`: a figure drawn elsewhere (Optuna's), laid out again and cropped to what is
    drawn, which costs drawing passes of its own."""
    matplotlib = headless()
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    crop = None
    if tight:
        fig.tight_layout()
        canvas = fig.canvas if hasattr(fig.canvas, "get_renderer") else FigureCanvasAgg(fig)
        crop = fig.get_tightbbox(canvas.get_renderer()).padded(0.1)  # measured once, for both files
    if crop is None:
        write_png(fig, path, DPI)  # savefig's pixels, written faster (png_file.py)
    else:
        fig.savefig(path, dpi=DPI, bbox_inches=crop)
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # the same figure as vectors, its text as text
        fig.savefig(path.with_suffix(".svg"), bbox_inches=crop)
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:  # a figure pyplot made (Optuna's) stays in its registry until closed
        pyplot.close(fig)
    return path


def save_figure(fig, folder: Path, name: str, tight: bool = True) -> Path:
    """A figure drawn elsewhere (Optuna's plots, sweeps.py's heatmaps), saved like the report's own;
    `tight=False`: one laid out by its maker (fixed margins), saved in one drawing pass per file."""
    return _save(fig, folder, name, tight=tight)


def _legend_outside(fig, ax) -> None:
    """One legend for the figure, right of the axes: it never covers a line. The figure is widened by the
    legend's measured width (the legend alone is laid out for it, not the figure) and, where the legend is
    taller than the panels, heightened; the panels keep their size."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    frame = _FRAMES[fig]
    legend = fig.legend(handles, labels, loc="upper left", fontsize=8, frameon=False, borderaxespad=0)
    box = legend.get_window_extent(FigureCanvasAgg(fig).get_renderer())
    frame.legend = box.width / fig.dpi + 0.3
    frame.bottom += max(0.0, box.height / fig.dpi - (frame.size()[1] - frame.top - frame.title - frame.bottom))
    frame.apply(fig)
    width, height = frame.size()
    legend.set_bbox_to_anchor((1 - (frame.legend - 0.15) / width, 1 - (frame.top + frame.title) / height),
                              transform=fig.transFigure)


def _panels(count: int, width: float = 3.6, height: float = 3.0):
    """A grid of `count` small axes (one per grid point), four per line; the spare ones hidden; room for a
    figure title above them."""
    columns = min(4, count)
    fig, axes = Frame(math.ceil(count / columns), columns, (width, height), title=0.35).figure()
    for ax in axes.flat[count:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:count])


def _single(width: float, height: float):
    """One axes of `width` x `height` inches (the plot area)."""
    fig, axes = Frame(1, 1, (width, height)).figure()
    return fig, axes[0][0]


def drawn_blocks(blocks: list[str]) -> list[str]:
    """Of the rows' grid points (in table order, repeated), those a figure of panels draws."""
    return _capped(list(dict.fromkeys(blocks)))[0]


def _capped(blocks: list[str]) -> tuple[list[str], str]:
    """The grid points drawn as panels (the first MAX_PANELS) and what the caption says about the others."""
    if len(blocks) <= MAX_PANELS:
        return blocks, ""
    return blocks[:MAX_PANELS], (f" Only the first {MAX_PANELS} of the {len(blocks)} grid points are drawn (more "
                                 "panels would not be readable); every grid point's numbers are in the table's CSV "
                                 "(linked below the table), the heat maps show the whole grid.")


def _line(ax, x, mean, std, label: str, baseline: bool) -> None:
    if baseline:
        label = f"{label} (baseline)"
    style = dict(color="black", linestyle="--") if baseline else {}
    marker = "o" if len(x) <= 30 else None  # dots mark measured points, until they would hide the line
    line, = ax.plot(x, mean, marker=marker, markersize=4, linewidth=1.6, label=label, **style)
    if np.isfinite(std).any():
        ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.08 if baseline else 0.18,
                        linewidth=0)


def by_length(table: Table, finished: pd.DataFrame, folder: Path) -> Plot:
    """One line per row against the evaluation length; a study read in blocks gets one panel per grid point."""
    from matplotlib.ticker import FixedLocator, NullLocator

    family = table.family
    metric = "perplexity" if family.key == "perplexity" else family.title.split(" by ")[0]
    blocks, capped = _capped(table.blocks or [""])
    fig, axes = _panels(len(blocks)) if table.blocks else _single(5.6, 3.4)
    axes = axes if table.blocks else [axes]
    by_block: dict[str, list] = {}
    for row in table.rows:
        by_block.setdefault(row.block, []).append(row)
    trained = training_lengths(finished)
    for ax, block in zip(axes, blocks):
        lengths = sorted(set(_draw_by_length(ax, table, by_block.get(block, []), bool(table.blocks))) | set(trained))
        _mark_training_lengths(ax, trained)
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(lengths))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([str(length) for length in lengths])
        title = point_words(block) or f"{family.title} ({table.value_text.split(' (')[0]})"
        _style(ax, title, "evaluation length L (log scale)", metric)
    if table.blocks:
        fig.suptitle(f"{family.title} ({table.value_text.split(' (')[0]}), one panel per grid point", fontsize=11)
    _legend_outside(fig, axes[0])
    name = f"{family.key}_vs_length"
    per = "one panel per grid point, one line per variant" if table.blocks else "one line per variant"
    marked = (f" The dotted vertical line marks the training length ({', '.join(map(str, trained))})."
              if trained else "")
    caption = (f"{family.title}: {per}, mean over seeds with a ± 1 std band where there are several seeds; "
               f"the baseline dashed. x: the evaluation lengths on a log2 axis.{marked}{capped}")
    return _plot(name, family.title, caption, _save(fig, folder, name))


def training_lengths(finished: pd.DataFrame) -> list[int]:
    """The training lengths of the finished trials (config.train.seq_len), each once, shortest first."""
    column = "config.train.seq_len"
    if column not in finished:
        return []
    return sorted({int(v) for v in pd.to_numeric(finished[column], errors="coerce").dropna()})


def _mark_training_lengths(ax, lengths: list[int]) -> None:
    """A dotted vertical line at each training length, labelled on the axes (and once in the legend): where
    extrapolation starts."""
    for number, length in enumerate(lengths):
        ax.axvline(length, color="grey", linestyle=":", linewidth=1.2, zorder=0,
                   label="training length" if number == 0 else None)
        ax.text(length, 1.0, f" train L={length}", transform=ax.get_xaxis_transform(), fontsize=7, color="dimgrey",
                ha="left", va="top")


def _draw_by_length(ax, table: Table, rows: list, by_variant: bool) -> list[int]:
    """The rows' lines on one axes (labelled by variant inside a block); returns the lengths drawn."""
    drawn: list[int] = []
    for row in rows:
        columns = [column for column in table.columns if row.cells[column].n and not row.cells[column].diverged]
        if not columns:
            continue
        lengths = [int(column.rsplit("_", 1)[1]) for column in columns]
        mean = np.array([row.cells[column].mean for column in columns])
        std = np.array([row.cells[column].std if row.cells[column].n > 1 else math.nan for column in columns])
        _line(ax, lengths, mean, std, row.variant if by_variant else row.label, row.is_baseline)
        drawn += lengths
    return sorted(set(drawn)) or [int(column.rsplit("_", 1)[1]) for column in table.columns]


def _ordered_values(key: str, values: list) -> list:
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return sorted(set(values))
    distinct = list(dict.fromkeys(values))
    if key == "model.preset":  # model size: smallest first
        return sorted(distinct, key=lambda v: list(PRESETS).index(v) if v in PRESETS else len(PRESETS))
    return distinct


def swept_keys(finished: pd.DataFrame) -> list[str]:
    """Swept keys worth a plot: within a group of rows that agree on every other swept value, at least
    two values of this one (kernel size 1, 3, 5 of DAPE V2; not Kerple's processor=none vs dapev2)."""
    keys = [c for c in finished.columns if c.startswith(SWEPT_TAG_PREFIX) and c != f"{SWEPT_TAG_PREFIX}train.seed"]
    worth = []
    for key in keys:
        others = [k for k in keys if k != key]
        rows = finished[finished[key].notna()]
        values = rows[key].astype(str)
        distinct = (values.groupby([rows[k].astype(str) for k in others], dropna=False).nunique() if others
                    else pd.Series([values.nunique()]))  # per group of the other values, in one pass
        if (distinct >= 2).any():
            worth.append(key)
    return worth


def versus_swept(key: str, table: Table, finished: pd.DataFrame, folder: Path) -> Plot | None:
    """The metric at the shortest and the longest evaluation length against one swept value: one line per
    combination of the other swept values. None where that would be more than MAX_LINES lines (a grid over
    several axes: its heat maps show it, sweeps.py)."""
    name_of = key.removeprefix(SWEPT_TAG_PREFIX)
    columns = [table.columns[0], table.columns[-1]] if len(table.columns) > 1 else table.columns
    others = [c for c in finished.columns if c.startswith(SWEPT_TAG_PREFIX) and c != key]
    with_key, without = finished[finished[key].notna()], finished[finished[key].isna()]
    lines = len(with_key[others].astype(str).drop_duplicates()) if others else 1
    if lines + without["label"].nunique() > MAX_LINES:
        return None
    values = _ordered_values(name_of, with_key[key].tolist())
    numeric = all(isinstance(v, (int, float)) for v in values)
    position = {v: (v if numeric else i) for i, v in enumerate(values)}
    fig, axes = Frame(1, len(columns), (3.5, 2.9), title=0.35).figure()
    for ax, column in zip(axes[0], columns):
        groups = (with_key.groupby([with_key[k].astype(str) for k in others], dropna=False) if others
                  else [((), with_key)])
        for group_key, group in groups:
            stats = group.groupby(key)[column].agg(["mean", "std"]).reindex([v for v in values if v in set(group[key])])
            label_parts = [assignment(k.removeprefix(SWEPT_TAG_PREFIX), _grouped_value(v)) for k, v in
                           zip(others, group_key if isinstance(group_key, tuple) else (group_key,)) if not _unset(v)]
            x = [position[v] for v in stats.index]
            label = (", ".join(label_parts) or "mean over seeds") + (" (baseline)" if group["baseline"].all() else "")
            _line(ax, x, stats["mean"].to_numpy(float), stats["std"].to_numpy(float), label, False)
        for label, rows in without.groupby("label"):  # rows that do not set this value: reference lines
            is_base = bool(rows["baseline"].iloc[0])
            ax.axhline(rows[column].mean(), color="black" if is_base else "grey", linestyle="--", linewidth=1,
                       label=f"{label}" + (" (baseline)" if is_base else ""))
        if not numeric:
            ax.set_xticks(list(position.values()), [str(v) for v in values])
        else:
            ax.set_xticks(values)
        _style(ax, f"{table.header(column)}", setting(name_of),
               "perplexity" if table.family.key == "perplexity" else table.family.key)
    _legend_outside(fig, axes[0][0])
    words = setting(name_of)
    fig.suptitle(f"{table.family.title.split(' by ')[0]} vs {words}", fontsize=11)
    name = f"{table.family.key}_vs_{name_of.replace('.', '_')}"
    caption = (f"{table.family.title.split(' by ')[0]} at the shortest and the longest evaluation length against "
               f"{words} ({name_of}); mean over seeds, ± 1 std band; dashed: rows that do not set it.")
    return _plot(name, f"vs {words}", caption, _save(fig, folder, name))


def _unset(grouped) -> bool:
    """A swept value a row does not set, as grouping by text leaves it (pandas 3 keeps it missing)."""
    return grouped is None or (isinstance(grouped, float) and math.isnan(grouped)) or grouped in ("nan", "None", "<NA>")


def _grouped_value(grouped):
    """A swept value grouped by its text, as a number again where it is one ("3.0" -> 3): named in words."""
    try:
        number = float(grouped)
    except (TypeError, ValueError):
        return grouped
    return int(number) if number.is_integer() else number


def training_curves(history: pd.DataFrame, rows: list[tuple[str, bool, str, str]], folder: Path) -> Plot | None:
    """`history`: long form (label, seed, step, value) of train_loss; `rows`: (label, is baseline, block,
    variant) in table order. A study read in blocks gets one panel per grid point."""
    if history.empty:
        return None
    from matplotlib.ticker import MaxNLocator

    blocks = list(dict.fromkeys(block for _, _, block, _ in rows))
    in_blocks = len(blocks) > 1
    blocks, capped = _capped(blocks)
    fig, axes = _panels(len(blocks)) if in_blocks else _single(5.6, 3.2)
    axes = axes if in_blocks else [axes]
    # Mean and std per (row, step) in one group-by, not one per row: the same numbers (each group's values in
    # the same order), a fraction of the time on a grid of hundreds of rows.
    stats = history.groupby(["label", "step"])["value"].agg(["mean", "std"])
    per_label = {label: steps.droplevel("label") for label, steps in stats.groupby(level="label", sort=False)}
    for ax, block in zip(axes, blocks):
        for label, is_baseline, row_block, variant in rows:
            per_step = per_label.get(label)
            if row_block != block or per_step is None:
                continue
            _line(ax, per_step.index.to_numpy(), per_step["mean"].to_numpy(float), per_step["std"].to_numpy(float),
                  variant if in_blocks else label, is_baseline)
        # Steps: about five round numbers (MaxNLocator alone gave three on 0-500: 0, 200, 400).
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=True, min_n_ticks=5))
        _style(ax, point_words(block) if in_blocks else "Training loss", "step", "train loss (nats/token)")
    if in_blocks:
        fig.suptitle("Training loss, one panel per grid point", fontsize=11)
    _legend_outside(fig, axes[0])
    caption = f"Training loss per logged step: one line per variant, mean over seeds with a ± 1 std band.{capped}"
    return _plot("training_curves", "Training curves", caption, _save(fig, folder, "training_curves"))


def _plot(name: str, title: str, caption: str, path: Path) -> Plot:
    return Plot(name, title, caption, path, path.with_suffix(".svg"))

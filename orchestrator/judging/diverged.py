"""Values no statistic can use: a diverged or failed evaluation.

A metric that is +-inf or NaN, or whose size is at least `OVERFLOW` (MLflow's SQLite store keeps +inf as
1.797e308, the largest double; a perplexity of 1e200 is as meaningless, and its square overflows), is the
mark of a training that diverged or an evaluation that failed (NoPE or RoPE far past their training
length), not a measurement.
The report never computes on it: a table cell with such a seed says "diverged" instead of a mean, its
comparison is not tested, the plots leave it out, and a claim that would read it is undecidable until the
seed is rerun (docs/deciding.md, "Values a test cannot use"). A value that is simply absent (a metric the
trial did not log) is NaN in the tables and stays "missing"; a claim names a finished trial's NaN as a
failed evaluation.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

# An outlying seed: a value the other seeds make unlikely, named in the claim (judged with it, not dropped).
# Seed i is outlying where its externally studentized distance from the others, (d_i - mean of the rest) /
# (SD of the rest x sqrt(1 + 1 / (n - 1))), is beyond the t_{n-2} quantile at OUTLIER_LEVEL / n two-sided
# (Bonferroni over the seeds): on normal seeds, a claim names one in at most OUTLIER_LEVEL of its looks.
OUTLIER_MIN_SEEDS = 5  # fewer seeds: the others' spread is too uncertain to call one of them far
OUTLIER_LEVEL = 0.01
OVERFLOW = 1e150  # at or above this size a value is an overflow, not a measurement: its square overflows a double
DIVERGED = "diverged"


def diverged(values: np.ndarray) -> np.ndarray:
    """Where `values` are infinite or overflowing (NaN is not counted: in a table it means "not logged")."""
    with np.errstate(invalid="ignore"):
        return np.abs(values) >= OVERFLOW  # an infinity is at or above it, NaN never is


def unusable(value: float) -> bool:
    """A single value no test can use: NaN, infinite, or overflowing."""
    return not math.isfinite(value) or abs(value) >= OVERFLOW


def describe(value: float) -> str:
    """How a claim names an unusable value: "diverged (+inf)", "diverged (1.797e+308)", "has no value (NaN: ...)"."""
    if math.isnan(value):
        return "has no value (NaN: a failed evaluation, or a metric its run did not log)"
    if math.isinf(value):
        return f"diverged ({'+' if value > 0 else '-'}inf)"
    return f"diverged ({value:.4g})"


def masked(frame: pd.DataFrame, whole_rows: bool = True) -> pd.DataFrame:
    """`frame` with its diverged numbers as NaN (for the plots), and with them (`whole_rows`: a frame of final
    values) every value of the same row (`label`) in that column: a mean over the seeds that did not diverge
    would draw a row better than it is, as the tables' "diverged" cell has no mean. A training curve
    (`whole_rows` False) loses only its diverged points."""
    numeric = frame.select_dtypes(include="number").columns
    if not len(numeric):
        return frame
    values = frame[numeric].to_numpy(dtype=float, copy=True)
    bad = diverged(values)
    if not bad.any():
        return frame
    if whole_rows and "label" in frame:  # the whole row's column: no mean over the seeds that are left
        labels = frame["label"].to_numpy()
        for column in np.flatnonzero(bad.any(axis=0)):
            bad[:, column] |= np.isin(labels, labels[bad[:, column]])
    values[bad] = np.nan
    out = frame.copy()
    out[numeric] = values
    return out


def outlying(values: np.ndarray) -> list[tuple[int, float]]:
    """(index, distance) of each outlying value among `values` (one per seed, at least OUTLIER_MIN_SEEDS): the
    distance in standard deviations of the other seeds from their mean, signed (+5.1: 5.1 SD above them)."""
    from scipy.special import stdtr

    n = values.size
    if n < OUTLIER_MIN_SEEDS or not np.isfinite(values).all():
        return []
    found = []
    for i in range(n):
        rest = np.delete(values, i)
        sd = float(rest.std(ddof=1))
        if not sd > 1e-12 * max(1.0, float(np.abs(rest).max())):
            continue  # the others tie: no spread to measure a distance by
        distance = (float(values[i]) - float(rest.mean())) / sd
        if 2 * float(stdtr(n - 2, -abs(distance) / math.sqrt(1 + 1 / (n - 1)))) <= OUTLIER_LEVEL / n:
            found.append((i, distance))
    return found

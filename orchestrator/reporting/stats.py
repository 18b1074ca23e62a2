"""Seed statistics and significance against the baseline.

A variant is compared with the baseline by a paired t-test over the seeds both ran (same seed = same data
order and initialisation stream), or Welch's t-test when fewer than 3 seeds match. The p-values of one table
are corrected together (Holm), and each comparison carries its effect size (Cohen's d). With fewer than
3 seeds on either side no test is run: the comparison says "n < 3" and is never significant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

MIN_SEEDS = 3
ALPHA = 0.05
N_TOO_SMALL = "n < 3"


@dataclass
class Summary:
    mean: float
    std: float  # sample std over seeds (ddof=1); NaN with one seed
    n: int


@dataclass
class Comparison:
    test: str  # "paired t" | "Welch t" | "n < 3" | "no variance"
    n: int  # seed pairs (paired) or the smaller group's size
    diff: float  # variant mean minus baseline mean
    p: float = math.nan
    p_holm: float = math.nan
    effect: float = math.nan  # Cohen's d: d_z of the paired differences, else on the average variance

    @property
    def tested(self) -> bool:
        return not math.isnan(self.p)

    @property
    def significant(self) -> bool:
        return self.tested and self.p_holm < ALPHA

    @property
    def marker(self) -> str:
        if not self.significant:
            return ""
        return "***" if self.p_holm < 0.001 else "**" if self.p_holm < 0.01 else "*"


def summarise(values: pd.Series) -> Summary:
    values = values.dropna()
    if values.empty:
        return Summary(math.nan, math.nan, 0)
    return Summary(float(values.mean()), float(values.std(ddof=1)) if len(values) > 1 else math.nan, len(values))


def compare(variant: pd.Series, baseline: pd.Series) -> Comparison:
    """`variant` and `baseline` are one metric's values indexed by seed."""
    variant, baseline = variant.dropna(), baseline.dropna()
    diff = float(variant.mean() - baseline.mean()) if len(variant) and len(baseline) else math.nan
    common = variant.index.intersection(baseline.index)
    if len(common) >= MIN_SEEDS:
        deltas = (variant[common] - baseline[common]).to_numpy(dtype=float)
        spread = deltas.std(ddof=1)
        if spread == 0:
            return Comparison("no variance", len(common), diff)
        p = float(stats.ttest_rel(variant[common].to_numpy(float), baseline[common].to_numpy(float)).pvalue)
        return Comparison("paired t", len(common), diff, p=p, effect=float(deltas.mean() / spread))
    if min(len(variant), len(baseline)) >= MIN_SEEDS:
        a, b = variant.to_numpy(float), baseline.to_numpy(float)
        pooled = math.sqrt((a.var(ddof=1) + b.var(ddof=1)) / 2)
        if pooled == 0:
            return Comparison("no variance", min(len(a), len(b)), diff)
        p = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
        return Comparison("Welch t", min(len(a), len(b)), diff, p=p, effect=float((a.mean() - b.mean()) / pooled))
    return Comparison(N_TOO_SMALL, len(common) or min(len(variant), len(baseline)), diff)


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down correction (controls the family-wise error rate over the table's comparisons):
    the k-th smallest of m p-values is multiplied by (m - k + 1), made non-decreasing, capped at 1.
    NaNs (untested comparisons) are left out of m and stay NaN."""
    values = np.asarray(pvalues, dtype=float)
    adjusted = np.full_like(values, np.nan)
    tested = np.flatnonzero(~np.isnan(values))
    m = len(tested)
    running = 0.0
    for rank, index in enumerate(tested[np.argsort(values[tested], kind="stable")]):
        running = max(running, min(1.0, (m - rank) * values[index]))
        adjusted[index] = running
    return adjusted.tolist()


def apply_holm(comparisons: list[Comparison]) -> None:
    for comparison, adjusted in zip(comparisons, holm([c.p for c in comparisons])):
        comparison.p_holm = adjusted


def format_p(p: float) -> str:
    if math.isnan(p):
        return "–"
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"

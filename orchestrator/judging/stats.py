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

from .diverged import diverged

MIN_SEEDS = 3
ALPHA = 0.05
N_TOO_SMALL = "n < 3"
DIVERGED_SEED = "not tested: a seed diverged"


@dataclass
class Summary:
    mean: float  # NaN where a seed diverged (diverged.py): no arithmetic on it
    std: float  # sample std over seeds (ddof=1); NaN with one seed
    n: int
    diverged: int = 0  # seeds whose value is infinite or overflowing (a diverged or failed evaluation)


@dataclass
class Comparison:
    test: str  # "paired t" | "Welch t" | "n < 3" | "no variance" | DIVERGED_SEED
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
    return summarise_array(np.asarray(values, dtype=float))


def _mean(values: np.ndarray) -> float:
    """As pandas computes a mean (the sum over the count): the same number to the last bit."""
    return float(values.sum() / values.size)


def summarise_array(values: np.ndarray) -> Summary:
    """`summarise` on plain numbers (NaN: missing), without a pandas object per cell: a report of hundreds of
    rows makes thousands of cells. The same arithmetic as pandas' mean and std (two passes, ddof=1)."""
    values = values[~np.isnan(values)]
    n = values.size
    if n == 0:
        return Summary(math.nan, math.nan, 0)
    bad = int(diverged(values).sum())
    if bad:
        return Summary(math.nan, math.nan, n, bad)
    mean = values.sum() / n
    std = float(np.sqrt(((mean - values) ** 2).sum() / (n - 1))) if n > 1 else math.nan
    return Summary(float(mean), std, n)


def compare(variant: pd.Series, baseline: pd.Series) -> Comparison:
    """`variant` and `baseline` are one metric's values indexed by seed."""
    return compare_arrays(variant.to_numpy(dtype=float), variant.index.to_numpy(),
                          baseline.to_numpy(dtype=float), baseline.index.to_numpy())


def compare_arrays(variant: np.ndarray, variant_seeds: np.ndarray, baseline: np.ndarray,
                   baseline_seeds: np.ndarray) -> Comparison:
    """`compare` on plain numbers and their seeds (see summarise_array)."""
    kept, kept_base = ~np.isnan(variant), ~np.isnan(baseline)
    variant, variant_seeds = variant[kept], variant_seeds[kept]
    baseline, baseline_seeds = baseline[kept_base], baseline_seeds[kept_base]
    if diverged(variant).any() or diverged(baseline).any():  # no arithmetic on an infinite or overflowing value
        return Comparison(DIVERGED_SEED, min(len(variant), len(baseline)), math.nan)
    diff = _mean(variant) - _mean(baseline) if len(variant) and len(baseline) else math.nan
    position = {seed: i for i, seed in enumerate(baseline_seeds)}
    common = [(i, position[seed]) for i, seed in enumerate(variant_seeds) if seed in position]  # the variant's order
    if len(common) >= MIN_SEEDS:
        deltas = variant[[i for i, _ in common]] - baseline[[j for _, j in common]]
        spread = deltas.std(ddof=1)
        if no_spread(deltas, float(max(np.abs(variant).max(), np.abs(baseline).max()))):
            return Comparison("no variance", len(common), diff)
        t = deltas.mean() / (spread / math.sqrt(len(deltas)))
        return Comparison("paired t", len(common), diff, p=_two_sided(t, len(deltas) - 1),
                          effect=float(deltas.mean() / spread))
    if min(len(variant), len(baseline)) >= MIN_SEEDS:
        a, b = variant, baseline
        pooled = math.sqrt((a.var(ddof=1) + b.var(ddof=1)) / 2)
        if pooled == 0:
            return Comparison("no variance", min(len(a), len(b)), diff)
        va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
        t = (a.mean() - b.mean()) / math.sqrt(va + vb)
        dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))  # Welch–Satterthwaite
        return Comparison("Welch t", min(len(a), len(b)), diff, p=_two_sided(t, dof),
                          effect=float((a.mean() - b.mean()) / pooled))
    return Comparison(N_TOO_SMALL, len(common) or min(len(variant), len(baseline)), diff)


TIE = 1e-9  # a spread below this fraction of the compared values' size is rounding: the values tie


def no_spread(values: np.ndarray, size: float = 0.0) -> bool:
    """The values (per-seed differences, or values) are the same on every seed, up to rounding: their spread
    is at most TIE x `size` (the size of the numbers they are differences of) or TIE x their own size. A
    t-test has no spread to judge them by (its p would be 0), so none is run."""
    if values.size < 2:
        return True
    spread = float(values.std(ddof=1))
    scale = max(size, float(np.abs(values).max()))
    return not math.isfinite(spread) or spread <= TIE * scale


def _two_sided(t: float, dof: float) -> float:
    """The two-sided p-value of a t statistic with `dof` degrees of freedom, P(|T| >= |t|), from scipy's
    Student t CDF (scipy.special.stdtr, which scipy.stats.t.sf calls too). scipy.special, not scipy.stats:
    imported on top of numpy, pandas and matplotlib it took 0.15-0.35 s, scipy.stats 1.0-1.3 s (python -X
    importtime, `orchestrator report` of studies/seeds_significance.yaml, on the busy 2-core machine); and it
    is imported here, so that only a report that runs a test pays it. tests/test_report.py and
    tests/test_claims.py check the p-values against scipy.stats' t-tests."""
    from scipy.special import stdtr

    if math.isnan(t) or math.isnan(dof):
        return math.nan
    return min(1.0, float(2.0 * stdtr(dof, -abs(t))))


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

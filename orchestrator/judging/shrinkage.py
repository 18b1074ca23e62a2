"""Empirical-Bayes shrinkage of the comparisons' variances: the moderated t-statistic (Smyth 2004, as limma).

The claims of a study share one source of noise, the seed. Each comparison g (a check's per-seed paired
differences at a look) has a sample variance s_g^2 on d_g degrees of freedom. The model: the true variances
sigma_g^2 are drawn from a scaled inverse chi-square prior, d0 s0^2 / sigma_g^2 ~ chi^2_{d0}, and given
sigma_g^2, s_g^2 ~ sigma_g^2 chi^2_{d_g} / d_g. Both s0^2 and the prior degrees of freedom d0 are estimated
from all the comparisons (`fit`, by the moments of log s_g^2: E[log s_g^2] = log sigma^2 + digamma(d_g/2) -
log(d_g/2), Var = trigamma(d_g/2), so that the spread of log s_g^2 beyond trigamma(d_g/2) is trigamma(d0/2)).
Each comparison's variance is then the posterior (d0 s0^2 + d_g s_g^2) / (d0 + d_g) and its t-statistic has
d0 + d_g degrees of freedom, at most the pooled degrees of freedom (the sum of the d_g: limma's cap)
(`Prior.variance`, `Prior.dof`): exact under the model when s0^2 and d0 are known. Where the comparisons'
variances look equal (no spread of log s_g^2 beyond sampling), d0 is infinite; where they differ widely,
d0 is near 0 and each keeps its own s_g^2 and d_g. Two departures from limma: a comparison uses d0 up to
PRIOR_WEIGHT x d_g (the prior weighs at most half as much as its own seeds), since with a few seeds per claim
an infinite d0 is often an artefact of noise, and the claims whose variance is above the others' then lose
their error rate (below); and the prior may only pull a quiet comparison's variance up, never a noisy one's
down (its variance is at least its own s_g^2, and above s0^2 it keeps its own d_g): a claim noisier than the
others is then judged nearly as it would be alone (issue 51).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_COMPARISONS = 3  # fewer than this: the prior's spread cannot be estimated, no shrinkage (d0 = 0)
# The prior counts at most this many times the comparison's own degrees of freedom (d0 <= PRIOR_WEIGHT x d_g).
# limma lets d0 go to infinity; at a first look of 1-3 degrees of freedom per claim the spread of log s_g^2 is
# mostly sampling noise, d0 often comes out infinite, and a claim whose seed noise is 4x the others' is judged
# with theirs: its false verdicts reached 0.085 and the study's 0.098 at a nominal 0.05. Capped at 1x, with
# two null claims at 9x the variance of six real 2-SD effects, the null claims' family-wise error was still
# 0.108 (issue 51); with the floor below (`Prior.variance`, `Prior.dof`) 0.058 at 1x and 0.042 at 0.5x
# (tests/benchmarks/bench_decisions.py sections 8-9, docs/deciding.md).
PRIOR_WEIGHT = 0.5


@dataclass(frozen=True)
class Prior:
    """The fitted prior: s0^2 (`scale`), d0 (`dof0`, 0 to infinity), and the pooled degrees of freedom
    (the sum of the fitted comparisons' d_g) that caps a comparison's total. A comparison uses d0 up to
    PRIOR_WEIGHT x its own degrees of freedom (`weight`). The prior may only pull a quiet comparison up,
    never a noisy one down: the posterior variance is never below the comparison's own, and a comparison
    whose own variance is above the prior's scale keeps its own degrees of freedom (the prior says nothing
    it may borrow: under unequal variances its noise is its own)."""

    scale: float
    dof0: float
    pooled: float

    def weight(self, dof: float) -> float:
        """The prior degrees of freedom a comparison on `dof` degrees of freedom uses: min(d0, PRIOR_WEIGHT x dof)."""
        return min(self.dof0, PRIOR_WEIGHT * dof)

    def variance(self, s2: float, dof: float) -> float:
        """The posterior variance of a comparison with sample variance `s2` on `dof` degrees of freedom, never
        below `s2`."""
        d0 = self.weight(dof)
        return s2 if d0 == 0 else max(s2, (d0 * self.scale + dof * s2) / (d0 + dof))

    def dof(self, dof: float, s2: float) -> float:
        """The moderated t-statistic's degrees of freedom: d0 + d_g, at most the pooled degrees of freedom;
        d_g alone where the comparison's sample variance `s2` is above the prior's scale."""
        d0 = self.weight(dof)
        return dof if d0 == 0 or s2 > self.scale else min(d0 + dof, max(self.pooled, dof))


NONE = Prior(math.nan, 0.0, 0.0)  # no shrinkage: each comparison alone


def trigamma_inverse(x: float) -> float:
    """y with trigamma(y) = x (x > 0), by Newton's method on 1/trigamma, which is nearly linear (Smyth 2004)."""
    from scipy.special import polygamma

    if x > 1e7:
        return 1.0 / math.sqrt(x)
    if x < 1e-6:
        return 1.0 / x
    y = 0.5 + 1.0 / x
    for _ in range(50):
        tri = float(polygamma(1, y))
        step = tri * (1.0 - tri / x) / float(polygamma(2, y))
        y += step
        if -step / y < 1e-8:
            break
    return y


def fit(variances: list[float] | np.ndarray, dof: float | list[float] | np.ndarray) -> Prior:
    """s0^2 and d0 from the comparisons' sample variances (positive) and degrees of freedom, by the
    method of moments on log s_g^2. Fewer than MIN_COMPARISONS positive variances: NONE."""
    from scipy.special import digamma, polygamma

    s2 = np.asarray(variances, dtype=float)
    d = np.broadcast_to(np.asarray(dof, dtype=float), s2.shape)
    keep = np.isfinite(s2) & (s2 > 0) & (d > 0)
    s2, d = s2[keep], d[keep]
    if s2.size < MIN_COMPARISONS:
        return NONE
    e = np.log(s2) - digamma(d / 2) + np.log(d / 2)
    mean = float(e.mean())
    excess = float(((e - mean) ** 2).sum() / (e.size - 1) - polygamma(1, d / 2).mean())
    pooled = float(d.sum())
    if excess <= 0:  # no spread beyond sampling: one variance for all
        return Prior(math.exp(mean), math.inf, pooled)
    dof0 = 2 * trigamma_inverse(excess)
    return Prior(math.exp(mean + float(digamma(dof0 / 2)) - math.log(dof0 / 2)), dof0, pooled)

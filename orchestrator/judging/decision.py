"""The decision rule for claims: a group-sequential, exact paired t-test at planned looks (seed counts).

A check of a claim ("A < 0.95 x B", "A - B < -margin", "A/B at 8x over 1x <= 2") is a statement about the mean
of a per-seed difference d_i = left_i - scale x right_i - shift: it holds where E[d] is on the claimed side of 0.
Seeds are added a batch at a time and the claims are judged at the *planned* looks n_1 < ... < n_K
(`Decide.looks()`, e.g. 2, 4, 6, 8, 10 seeds); a look at n reads the first n seeds of `Decide.seed_order`, so
the data of a look extend those of the one before.

At each look k the exact one-sample t-test on d_1..d_{n_k} gives a one-sided p-value p_k in each direction.
Under a normal null (E[d] = 0) the joint law of (t_1, ..., t_K) does not depend on the spread of d (each t is
scale-invariant), so the law of the statistic M = min_k p_k / w_k (w_k: the looks' weights, `FIRST_LOOK_WEIGHT`) is
known exactly; `Design` draws it once by simulation (a fixed random stream: the same data always give the
same verdict). The *sequential p-value* of a check in one direction is F(min over the looks taken of
p_k / w_k), F the null distribution function of M over ALL planned looks. Taking fewer looks (stopping once
decided, or because a budget ran out) only makes the minimum larger, so P(sequential p <= u) <= u under the
null whatever the stopping rule, as long as looks are only taken at planned seed counts. With one planned
look (a study without `decide`, judged at the seeds it has) F(u) = u: the plain paired t-test.

Why a group-sequential t-test and not an e-process or a confidence sequence (expectation, ville, confseq):
with 2-3 seeds, a scale-invariant e-value for a t-test cannot reach 1/alpha = 20 even on an effect of 5 seed
standard deviations (its largest possible value, from the most favourable sample, is about 18 at n = 2,
docs/deciding.md), so an anytime-valid rule would never decide at the minimum; the exact t-test at planned
looks decides a large effect at 2-4 seeds. Group-sequential packages (gsDesign-like) compute boundaries for
a z-statistic with a known variance, which at 2-10 seeds is far from the t-statistic; here the boundaries
are exact for the t-statistic (the calibration by simulation is the only approximation: `SIMULATIONS`).

The nominal one-sided level of look k is a_k = lambda x w_k with F(lambda) = alpha / 2: each look's interval
uses it, so that the intervals of all planned looks cover the true effect at once with probability >= 1 -
alpha; a check reports their intersection over the looks taken (or, where that leaves out the last look's
estimate, the last look's interval: on the same event both cover).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping

import numpy as np

from .diverged import outlying
from .shrinkage import NONE, Prior
from .stats import no_spread

SIMULATIONS = 262_144  # null paths drawn per design: F's Monte Carlo error is about +-0.0003 at F = 0.025
_STREAM = 20_261_202  # the fixed random stream of the calibration
# The weight of each look's p-value (the first look, then every later one). A first look weighted 2x gets
# about twice the nominal level of a later one: at 2 seeds the t-test has 1 degree of freedom, and a large
# effect is decided there only if the first look is not starved (tests/benchmarks/bench_decisions.py
# compares the weightings: docs/deciding.md).
FIRST_LOOK_WEIGHT = 2.0


def look_weights(looks: tuple[int, ...], first: float = FIRST_LOOK_WEIGHT) -> np.ndarray:
    return np.array([first] + [1.0] * (len(looks) - 1)) if len(looks) > 1 else np.ones(1)


def _student_cdf(dof: np.ndarray | float, t: np.ndarray | float) -> np.ndarray:
    """P(T <= t) for Student's t with `dof` degrees of freedom (scipy.special: cheap to import)."""
    from scipy.special import stdtr

    return stdtr(dof, t)


def student_quantile(dof: float, q: float) -> float:
    from scipy.special import stdtrit

    return float(stdtrit(dof, q))


def one_sided_p(d: np.ndarray, size: float = 0.0, prior: Prior = NONE) -> tuple[float, float]:
    """(p that E[d] > 0, p that E[d] < 0) by the one-sample t-test of `d` (two or more values); with a
    fitted `prior` (shrinkage.py: the study's shared variance), the moderated t-test. The same value at every
    seed, up to rounding (stats.no_spread; `size`: the size of the numbers d is made of): no test, (1, 1).
    Its t would be infinite and its p 0, yet values that tie by rounding say nothing of the seed-to-seed
    spread (false verdicts reached 0.10-0.135 with p = 0 there: docs/deciding.md)."""
    n = d.size
    mean = float(d.mean())
    if no_spread(d, size):
        return 1.0, 1.0
    s2 = float(d.var(ddof=1))
    dof = prior.dof(n - 1, s2)
    t = mean / math.sqrt(prior.variance(s2, n - 1) / n)
    return float(_student_cdf(dof, -t)), float(_student_cdf(dof, t))  # P(T >= t), P(T <= t)


@dataclass(frozen=True)
class Design:
    """Planned looks (seed counts) and the error rate alpha a claim's two-sided decision is made at."""

    looks: tuple[int, ...]
    alpha: float = 0.05
    first_weight: float = FIRST_LOOK_WEIGHT  # the first look's weight (later ones: 1)

    def __post_init__(self) -> None:
        if not self.looks or list(self.looks) != sorted(set(self.looks)) or self.looks[0] < 2:
            raise ValueError(f"looks must be increasing seed counts of at least 2, got {list(self.looks)}")

    @property
    def weights(self) -> np.ndarray:
        return look_weights(self.looks, self.first_weight)

    def statistic(self, p_by_look: list[float]) -> float:
        """min_k p_k / w_k over the looks taken (the first len(p_by_look) planned ones)."""
        return min(p / w for p, w in zip(p_by_look, self.weights))

    def sequential_p(self, p_by_look: list[float]) -> float:
        """F(min_k p_k / w_k): a valid p-value whatever the number of planned looks taken."""
        if not p_by_look:
            return 1.0
        value = self.statistic(p_by_look)
        if len(self.looks) == 1:
            return float(min(1.0, value))
        null = self.null()
        return (float(np.searchsorted(null, value, side="right")) + 1) / (null.size + 1)

    @property
    def scale(self) -> float:
        """lambda: F(lambda) = alpha / 2; look k's nominal one-sided level is lambda x w_k."""
        if len(self.looks) == 1:
            return self.alpha / 2
        null = self.null()
        count = math.floor(self.alpha / 2 * (null.size + 1)) - 1  # F(null[count - 1]) <= alpha / 2
        return float(null[count - 1]) if count >= 1 else float(null[0]) / 2

    def null(self) -> np.ndarray:
        """The sorted null sample of min_k p_k / w_k over every planned look (drawn once per design)."""
        return _null_minima(self.looks, self.first_weight)

    def nominal(self, look: int) -> float:
        """The one-sided level of the look at `look` seeds (its index in the plan)."""
        return self.scale * float(self.weights[self.looks.index(look)])

    def taken(self, seeds: int) -> tuple[int, ...]:
        """The planned looks at or below `seeds`."""
        return tuple(n for n in self.looks if n <= seeds)


@lru_cache(maxsize=32)
def _null_minima(looks: tuple[int, ...], first: float) -> np.ndarray:
    """The sorted null sample of min_k p_k / w_k (upper one-sided p; by symmetry the same law for the lower)."""
    rng = np.random.default_rng(_STREAM)
    weights = look_weights(looks, first)
    minima = np.full(SIMULATIONS, np.inf)
    chunk = 32_768  # bounded memory: 32k paths x 10 seeds at a time
    for start in range(0, SIMULATIONS, chunk):
        x = rng.standard_normal((min(chunk, SIMULATIONS - start), looks[-1]))
        total, squares = np.cumsum(x, axis=1), np.cumsum(x * x, axis=1)
        part = minima[start:start + x.shape[0]]
        for n, w in zip(looks, weights):
            mean = total[:, n - 1] / n
            var = (squares[:, n - 1] - n * mean * mean) / (n - 1)
            t = mean / np.sqrt(np.maximum(var, 1e-300) / n)
            np.minimum(part, _student_cdf(n - 1, -t) / w, out=part)
    return np.sort(minima)


# --- one check's evidence over the looks -----------------------------------------------------------------------
DIFFERENCE, RATIO, VALUE = "difference", "ratio", "value"


@dataclass
class Evidence:
    """A check judged at the looks taken: its effect (A - B, A / B, or A's value, as the claim states it)
    at the last look, its interval (intersected over the looks), and its sequential one-sided p-values."""

    kind: str  # DIFFERENCE, RATIO or VALUE
    effect: float
    low: float
    high: float
    bound: float  # the check's bound on the effect's scale: the claimed side of it is where the check holds
    p_right: float  # sequential p that the check holds (the effect on the claimed side of the bound)
    p_wrong: float  # ... that it does not
    seeds: int
    tie: bool = False  # the per-seed differences (or values) at the last look are the same on every seed: no test
    log: bool = False  # tested on the log scale: the effect is a geometric mean (of the ratios, or of the values)
    # (seeds, sample variance) of the tested per-seed differences at each look taken, ties left out: what the
    # study's shared variance is fitted on (shrinkage.py)
    spreads: tuple[tuple[int, float], ...] = ()
    shared: bool = False  # tested with the study's shared variance (a moderated t-test)
    # the outlying seeds of the tested per-seed differences at the last look (diverged.outlying): (position in
    # the seed order, distance in SDs of the other seeds); judged with them, and the claim names them
    outlying: tuple[tuple[int, float], ...] = ()

    @property
    def words(self) -> str:
        """How the effect is named: "difference", "ratio", "value", or on the log scale "geometric-mean
        ratio" / "geometric-mean value"."""
        return f"geometric-mean {self.kind}" if self.log else self.kind


def _interval(kind: str, a: np.ndarray, b: np.ndarray | None, level: float,
              prior: Prior = NONE) -> tuple[float, float]:
    """The two-sided interval with one-sided `level` in each tail: a t-interval of mean(a - b) or mean(a)
    (with the moderated variance and degrees of freedom of a fitted `prior`), or Fieller's interval of
    mean(a) / mean(b) (the ratios r that a paired t-test of a - r b does not reject)."""
    n = a.size
    values = a - b if b is not None else a
    s2 = float(values.var(ddof=1))
    c = student_quantile(n - 1 if kind == RATIO else prior.dof(n - 1, s2), 1 - level)
    if kind == RATIO:
        assert b is not None
        cov = np.cov(a, b, ddof=1)
        qa = n * b.mean() ** 2 - c * c * cov[1, 1]
        qb = -2 * (n * a.mean() * b.mean() - c * c * cov[0, 1])
        qc = n * a.mean() ** 2 - c * c * cov[0, 0]
        disc = qb * qb - 4 * qa * qc
        if qa <= 0 or disc < 0:
            return -math.inf, math.inf  # the denominator's mean is not clearly away from 0: no finite interval
        root = math.sqrt(disc)
        return (-qb - root) / (2 * qa), (-qb + root) / (2 * qa)
    if no_spread(values, float(np.abs(a).max()) if b is None else float(max(np.abs(a).max(), np.abs(b).max()))):
        return -math.inf, math.inf  # no spread to size an interval by (one_sided_p runs no test either)
    half = c * math.sqrt(prior.variance(s2, n - 1) / n)
    return float(values.mean()) - half, float(values.mean()) + half


def on_log_scale(kind: str, left: np.ndarray, right: np.ndarray | None, scale: float, shift: float) -> bool:
    """A ratio (A < scale x B) or a bound (A < c) of positive values is tested on the log scale: the per-seed
    log A - log B - log scale (or log A - log c). Perplexity is positive and right-skewed (exp of a mean
    loss): its log, the loss, is close to normal, where a t-test on raw ratios or values is not (the
    one-sided error reached 0.23 at a lognormal sigma of 1: docs/deciding.md)."""
    if kind == RATIO:
        return shift == 0.0 and scale > 0 and right is not None and bool((left > 0).all() and (right > 0).all())
    return kind == VALUE and right is None and shift > 0 and bool((left > 0).all())


def evidence(design: Design, left: np.ndarray, right: np.ndarray | None, relation: str, scale: float = 1.0,
             shift: float = 0.0, kind: str | None = None, priors: Mapping[int, Prior] | None = None) -> Evidence:
    """`left` and `right` (None: the constant `shift`): per-seed values in the design's seed order, as many as
    the last look taken reads. The check: left `relation` scale x right + shift. `kind`: how its effect is
    stated (default: a ratio where scale is not 1, else a difference; a value where right is None); a
    check A < B among ratio checks of the same two sides is the ratio A/B < 1. Ratios and bounds of positive
    values are tested on the log scale (`on_log_scale`): the effect is then the geometric mean of the
    per-seed ratios (or values), its interval the t-interval of the log scale's mean, exponentiated.
    `priors`: the study's shared variance by look (seeds -> shrinkage.Prior; `shared_priors`): each look's
    test is the moderated t-test with the prior fitted at that look."""
    kind = kind or (VALUE if right is None else (RATIO if scale != 1.0 else DIFFERENCE))
    if on_log_scale(kind, left, right, scale, shift):
        return _log_evidence(design, left, right, relation, scale, shift, kind, priors)
    return _linear(design, left, right, relation, scale, shift, kind, priors)


def _linear(design: Design, left: np.ndarray, right: np.ndarray | None, relation: str, scale: float,
            shift: float, kind: str, priors: Mapping[int, Prior] | None = None) -> Evidence:
    """`evidence` on the values as they are (`kind` given)."""
    bound = shift if kind != RATIO else scale
    d = left - (scale * right if right is not None else 0.0) - shift
    sign = -1.0 if relation == "<" else 1.0  # the claimed side: d < 0 for "<"
    looks = design.taken(left.size)
    rights, wrongs, low, high = [], [], -math.inf, math.inf
    size = float(np.abs(left).max()) if right is None else float(max(np.abs(left).max(), np.abs(scale * right).max()))
    size = max(size, abs(shift))
    spreads = []
    for n in looks:
        prior = (priors or {}).get(n, NONE)
        above, below = one_sided_p(d[:n], size, prior)
        rights.append(above if sign > 0 else below)
        wrongs.append(below if sign > 0 else above)
        lo, hi = _interval(kind, left[:n], right[:n] if right is not None else None, design.nominal(n), prior)
        low, high = max(low, lo), min(high, hi)
        if not no_spread(d[:n], size):
            spreads.append((n, float(d[:n].var(ddof=1))))
    n = looks[-1]
    a, b = left[:n], (right[:n] if right is not None else None)
    if kind == RATIO:
        assert b is not None, "a ratio is stated between two sides: right is given"
        effect = float(a.mean() / b.mean())
    else:
        effect = float((a - b).mean()) if b is not None else float(a.mean())
    if not low <= effect <= high:  # the intersection left the last look's estimate out: its interval alone
        low, high = _interval(kind, a, b, design.nominal(n), (priors or {}).get(n, NONE))  # (every look's
        # interval covers at once: as valid)
    return Evidence(kind, effect, low, high, bound, design.sequential_p(rights), design.sequential_p(wrongs), n,
                    tie=no_spread(d[:n], size), spreads=tuple(spreads),
                    shared=any(not math.isnan(prior.scale) for prior in (priors or {}).values()),
                    outlying=tuple(outlying(d[:n])))


def _log_evidence(design: Design, left: np.ndarray, right: np.ndarray | None, relation: str, scale: float,
                  shift: float, kind: str, priors: Mapping[int, Prior] | None = None) -> Evidence:
    """`evidence` on the log scale: the difference check log A - log B against log scale (or log A against
    log c), its effect and interval exponentiated back to a ratio (or a value)."""
    logs = np.log(left)
    if right is not None:  # log A - log B against log scale: A's logs shifted by it, the effect shifted back
        bound = math.log(scale)
        ev = _linear(design, logs - bound, np.log(right), relation, 1.0, 0.0, DIFFERENCE, priors)
    else:  # log A against log c
        bound = 0.0
        ev = _linear(design, logs, None, relation, 1.0, math.log(shift), VALUE, priors)
    return Evidence(kind, math.exp(ev.effect + bound), math.exp(ev.low + bound), math.exp(ev.high + bound),
                    scale if kind == RATIO else shift, ev.p_right, ev.p_wrong, ev.seeds, tie=ev.tie, log=True,
                    spreads=ev.spreads, shared=ev.shared, outlying=ev.outlying)


def shared_priors(checks: list[Evidence]) -> dict[int, Prior]:
    """The study's shared variance at each look (seeds -> shrinkage.Prior): fitted on the sample variances
    of every tested check that reached that look (its per-seed differences on the first n seeds, ties left
    out), each on n - 1 degrees of freedom (shrinkage.fit)."""
    from .shrinkage import fit

    by_look: dict[int, list[float]] = {}
    for check in checks:
        for n, s2 in check.spreads:
            by_look.setdefault(n, []).append(s2)
    return {n: fit(values, n - 1) for n, values in sorted(by_look.items())}


def claim_p(checks: list[Evidence]) -> tuple[float, bool]:
    """(two-sided p, leans to "holds") of a claim made of `checks`. It holds where every check does (an
    intersection-union test: the largest of their p_right) and fails where any check is on the wrong side
    (a union: the smallest p_wrong, times the number of checks). The claim's p is twice the smaller of the
    two, so that under no effect the chance of either false verdict is at most alpha in all."""
    hold = max(check.p_right for check in checks)
    fail = min(1.0, len(checks) * min(check.p_wrong for check in checks))
    return min(1.0, 2 * min(hold, fail)), hold <= fail

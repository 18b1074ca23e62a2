"""How the claims' decision rule (orchestrator/judging/decision.py) behaves, by simulation: 10,000 studies
per setting, each one claim "the effect is above 0" read on per-seed differences d_1..d_10 (seed-to-seed
spread 1: effects are in seed standard deviations).

    python tests/benchmarks/bench_decisions.py              # ~1 minute on a busy 2-core machine
    python tests/benchmarks/bench_decisions.py --studies 2000 --no-evalue

Prints:
1. Under no effect (normal, and Student t with 3 degrees of freedom: heavy tails), the false-verdict rate
   (the claim declared to hold or to fail) of the sequential rule at the default design (`decide:` defaults:
   looks at 2, 4, 6, 8, 10 seeds), with its exact 95% (Clopper-Pearson) interval, against the nominal alpha;
   and the naive rule "add a seed until the t-test's p < 0.05 (at most 10)", which the sequential rule
   replaces.
2. Under effects of 0.5, 1, 2 and 5 seed SDs: the sequential rule's power (the claim declared to hold), the
   mean and 90th percentile of the seeds it trained, against fixed designs of 3, 5 and 10 seeds (the
   two-sided paired t-test at the same alpha).
3. Designs compared: the first look's weight (decision.FIRST_LOOK_WEIGHT: 1 is Pocock's constant level, 2
   the default, 4) and the looks (decide's min_seeds and batch), for one claim and for 8 claims with Holm.
4. A study of 8 claims with Holm across them: any false verdict under no effect, seeds per claim under effects.
5. The largest value a scale-invariant e-value for the t-test can take at 2-4 seeds (why the rule is not an
   e-process): at 2 seeds it stays below 1/alpha = 20 even for an effect of 5 SDs.
6. Perplexity-shaped data, judged by the product's own code look by look (`--skewed` studies per case,
   default 2000): a bound claim "A < c" and a ratio claim "A < 0.95 x B" on lognormal values (sigma 0.25,
   0.5, 1) exactly at the claim's bound (the log scale's null: geometric mean at the bound); the same with
   an occasional bad seed (one seed in ten 3x off); values that tie by rounding; and a design changed on
   resume (judged to max_seeds 10, the undecided ones judged again under looks to 18, as a resume that
   was not refused would). Each: the rate of false "holds" (nominal alpha/2: the claim is two-sided) and
   of any false verdict (nominal alpha), with 95% intervals; for comparison, the rule before issue 41
   (t-test on the raw values, at its own null: arithmetic mean at the bound).
8. Shared variance (`decide: {shared_variance: true}`: shrinkage.py's moderated t-test, d0 capped at d_g)
   against each claim alone and against limma's uncapped d0, on a study of 8 claims with Holm (as section
   4): under no effect with equal variances, with half the claims at 4x the variance, and with one claim at
   4x or 16x, the rate of studies with any false verdict and
   of false verdicts on the high-variance claims, with 95% intervals (nominal alpha); at an effect of 2 seed
   SDs on every claim, power and mean seeds per claim. Vectorised; the first 100 studies of each setting
   are also judged by the product's code (evidence with decision.shared_priors, claim_p, stats.holm).
9. Issue 51's cases: (a) shared variance with two null claims at 9x the variance of six claims with real
   2-SD effects (8 claims, Holm); (b) small studies (3-5 claims) whose decided claims' rows stop, so the
   rows are at different seed counts and the prior at a later look is fitted on the few still open: the
   family-wise error over the null claims, with 95% intervals, alone, capped (the rule before issue 51) and
   shared (the product); (c) one claim, one seed in ten at +5 SD (each seed independently, or exactly one
   of the ten), and (d) one claim "A - B < 0" whose differences are additively skewed (lognormal sigma 1,
   centred at its mean 0):
   false verdicts, and how often the product names an outlying seed (diverged.outlying).
7. Early stops exaggerate: at true effects of 0.5, 1, 2 and 5 seed SDs, the mean effect the decided claims
   report over the true one, by the look they stopped at, and how often their interval covers the truth.

The rule is simulated vectorised (every study at once) with the product's calibrated null law
(Design.null()); the first 300 studies of each setting are also judged by the product's own per-claim
code (decision.evidence and claim_p, look by look) and the two must agree: "agree 300/300".
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy import integrate, stats
from scipy.special import stdtr

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from orchestrator.judging.decision import DIFFERENCE, RATIO, VALUE, Design, _linear, claim_p, evidence, shared_priors
from orchestrator.judging.shrinkage import MIN_COMPARISONS, PRIOR_WEIGHT, trigamma_inverse
from orchestrator.judging.stats import holm
from orchestrator.study.model import Decide

ALPHA = 0.05
MAX_SEEDS = 10


def draw(studies: int, effect: float, tails: str, rng: np.random.Generator) -> np.ndarray:
    """Per-seed differences with mean `effect` and standard deviation 1 (t3 scaled to unit variance)."""
    if tails == "normal":
        noise = rng.standard_normal((studies, MAX_SEEDS))
    else:
        noise = rng.standard_t(3, (studies, MAX_SEEDS)) / math.sqrt(3.0)
    return effect + noise


def _p_sides(d: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(p that the mean is above 0, p that it is below) of the t-test on the first n columns, per row."""
    x = d[:, :n]
    t = x.mean(axis=1) / (x.std(axis=1, ddof=1) / math.sqrt(n))
    return stdtr(n - 1, -t), stdtr(n - 1, t)


def sequential(design: Design, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(verdict: +1 holds, -1 fails, 0 inconclusive; seeds trained) of the rule, every study at once: at each
    planned look, the sequential p-values F(min_k p_k / w_k) of both sides; decided where 2 x the smaller is
    at most alpha; an undecided study goes on to the next look."""
    null = design.null() if len(design.looks) > 1 else None
    studies = d.shape[0]
    verdict = np.zeros(studies, dtype=int)
    seeds = np.full(studies, design.looks[-1])
    best_up = np.full(studies, np.inf)
    best_down = np.full(studies, np.inf)
    for n, w in zip(design.looks, design.weights):
        up, down = _p_sides(d, n)
        best_up, best_down = np.minimum(best_up, up / w), np.minimum(best_down, down / w)
        if null is None:
            f_up, f_down = best_up, best_down
        else:
            f_up = np.searchsorted(null, best_up, side="right") / null.size
            f_down = np.searchsorted(null, best_down, side="right") / null.size
        p = np.minimum(1.0, 2 * np.minimum(f_up, f_down))
        now = (verdict == 0) & (p <= design.alpha)
        verdict[now] = np.where(f_up[now] <= f_down[now], 1, -1)
        seeds[now] = n
    return verdict, seeds


def product(design: Design, d: np.ndarray) -> tuple[int, int]:
    """One study judged by the product's code, look by look, as `run --decide` does."""
    for n in design.looks:
        check = evidence(design, d[:n], None, ">")
        p, holds = claim_p([check])
        if p <= design.alpha:
            return (1 if holds else -1), n
    return 0, design.looks[-1]


def fixed(d: np.ndarray, n: int) -> np.ndarray:
    up, down = _p_sides(d, n)
    p = np.minimum(1.0, 2 * np.minimum(up, down))
    return np.where(p <= ALPHA, np.where(up <= down, 1, -1), 0)


def naive(d: np.ndarray, start: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Add a seed until the two-sided t-test's p < 0.05, from `start` seeds up to 10."""
    verdict = np.zeros(d.shape[0], dtype=int)
    seeds = np.full(d.shape[0], MAX_SEEDS)
    for n in range(start, MAX_SEEDS + 1):
        now = (verdict == 0) & (fixed(d, n) != 0)
        verdict[now] = fixed(d, n)[now]
        seeds[now] = n
    return verdict, seeds


def rate(hits: int, total: int) -> str:
    low = stats.beta.ppf(0.025, hits, total - hits + 1) if hits else 0.0
    high = stats.beta.ppf(0.975, hits + 1, total - hits) if hits < total else 1.0
    return f"{hits / total:.4f} [{low:.4f}, {high:.4f}]"


def holm_adjusted(p: np.ndarray) -> np.ndarray:
    """Holm's adjusted p-values of each row (study) of `p` (studies x claims)."""
    m = p.shape[1]
    order = np.argsort(p, axis=1)
    ranked = np.take_along_axis(p, order, axis=1) * (m - np.arange(m))
    adjusted = np.minimum(1.0, np.maximum.accumulate(ranked, axis=1))
    out = np.empty_like(p)
    np.put_along_axis(out, order, adjusted, axis=1)
    return out


def many_claims(design: Design, d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A study of several claims (d: studies x claims x seeds, each claim on its own rows), as `run --decide`
    runs it: at each look the undecided claims' rows get their seeds, every claim's sequential p (its last
    look's for the decided ones) is Holm-corrected, and a claim is decided where its adjusted p <= alpha.
    Returns (verdicts, seeds per claim)."""
    studies, claims, _ = d.shape
    null = design.null()
    verdict = np.zeros((studies, claims), dtype=int)
    seeds = np.full((studies, claims), design.looks[-1])
    best_up = np.full((studies, claims), np.inf)
    best_down = np.full((studies, claims), np.inf)
    p = np.ones((studies, claims))
    f_up = np.ones((studies, claims))
    f_down = np.ones((studies, claims))
    for n, w in zip(design.looks, design.weights):
        open_ = verdict == 0
        x = d[:, :, :n]
        t = x.mean(axis=2) / (x.std(axis=2, ddof=1) / math.sqrt(n))
        best_up = np.where(open_, np.minimum(best_up, stdtr(n - 1, -t) / w), best_up)
        best_down = np.where(open_, np.minimum(best_down, stdtr(n - 1, t) / w), best_down)
        f_up = (np.searchsorted(null, best_up.ravel(), side="right").reshape(best_up.shape) + 1) / (null.size + 1)
        f_down = (np.searchsorted(null, best_down.ravel(), side="right").reshape(best_up.shape) + 1) / (null.size + 1)
        p = np.minimum(1.0, 2 * np.minimum(f_up, f_down))
        now = open_ & (holm_adjusted(p) <= design.alpha)
        verdict[now] = np.where(f_up[now] <= f_down[now], 1, -1)
        seeds[now] = n
    return verdict, seeds


def _fitted(s2: np.ndarray, open_: np.ndarray, dof: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """shrinkage.fit per study (row) over its open claims' variances `s2` at one look: (s0^2, d0, pooled
    degrees of freedom); d0 = 0 where fewer than MIN_COMPARISONS claims are open."""
    from scipy.special import digamma, polygamma

    count = open_.sum(axis=1)
    e = np.where(open_, np.log(np.where(open_, s2, 1.0)) - digamma(dof / 2) + math.log(dof / 2), 0.0)
    mean = e.sum(axis=1) / np.maximum(count, 1)
    spread = np.where(open_, (e - mean[:, None]) ** 2, 0.0).sum(axis=1) / np.maximum(count - 1, 1)
    excess = spread - float(polygamma(1, dof / 2))
    d0 = np.full(s2.shape[0], np.inf)
    some = excess > 0
    d0[some] = 2 * np.array([trigamma_inverse(float(x)) for x in excess[some]])
    scale = np.exp(mean)
    scale[some] = np.exp(mean[some] + digamma(d0[some] / 2) - np.log(d0[some] / 2))
    d0[count < MIN_COMPARISONS] = 0.0
    return scale, d0, count * float(dof)


def many_claims_shared(design: Design, d: np.ndarray, rule: str) -> tuple[np.ndarray, np.ndarray]:
    """`many_claims`, each look's t-test moderated by the prior fitted on the claims open at that look (the
    ones whose rows got its seeds): `rule` "shared" as the product (d0 at most PRIOR_WEIGHT x d_g; the
    posterior variance never below the claim's own, and a claim whose own variance is above the prior's
    scale keeps its own degrees of freedom), "capped" as the product before issue 51 (d0 at most
    PRIOR_WEIGHT x d_g, nothing else), "limma" with d0 uncapped, "alone" not moderated."""
    studies, claims, _ = d.shape
    null = design.null()
    verdict = np.zeros((studies, claims), dtype=int)
    seeds = np.full((studies, claims), design.looks[-1])
    best_up = np.full((studies, claims), np.inf)
    best_down = np.full((studies, claims), np.inf)
    for n, w in zip(design.looks, design.weights):
        open_ = verdict == 0
        x = d[:, :, :n]
        s2 = x.var(axis=2, ddof=1)
        dof = np.full((studies, claims), float(n - 1))
        if rule != "alone":
            scale, d0, pooled = (part[:, None] for part in _fitted(s2, open_, n - 1))
            if rule in ("shared", "capped"):
                d0 = np.minimum(d0, (PRIOR_WEIGHT if rule == "shared" else 1.0) * (n - 1))
            finite = np.where(np.isinf(d0), 0.0, d0)
            own = s2
            s2 = np.where(d0 == 0, s2, np.where(np.isinf(d0), scale, (finite * scale + (n - 1) * s2)
                                                / np.maximum(finite + n - 1, 1e-300)))
            dof = np.where(d0 == 0, n - 1, np.minimum(d0 + n - 1, np.maximum(pooled, n - 1)))
            if rule == "shared":  # the product since issue 51: never below its own variance, and a claim
                # noisier than the prior's scale keeps its own degrees of freedom
                s2 = np.maximum(s2, own)
                dof = np.where(own > scale, n - 1, dof)
        t = x.mean(axis=2) / np.sqrt(s2 / n)
        best_up = np.where(open_, np.minimum(best_up, stdtr(dof, -t) / w), best_up)
        best_down = np.where(open_, np.minimum(best_down, stdtr(dof, t) / w), best_down)
        f_up = (np.searchsorted(null, best_up.ravel(), side="right").reshape(best_up.shape) + 1) / (null.size + 1)
        f_down = (np.searchsorted(null, best_down.ravel(), side="right").reshape(best_up.shape) + 1) / (null.size + 1)
        p = np.minimum(1.0, 2 * np.minimum(f_up, f_down))
        now = open_ & (holm_adjusted(p) <= design.alpha)
        verdict[now] = np.where(f_up[now] <= f_down[now], 1, -1)
        seeds[now] = n
    return verdict, seeds


def product_many(design: Design, d: np.ndarray, shared: bool) -> tuple[list[int], list[int]]:
    """One study of several claims (d: claims x seeds) judged by the product's code, look by look, as
    claims.py replays them: every claim's evidence alone on the seeds its rows have (n for the open ones, its
    stopping look's for the decided), the priors fitted on them where `shared`, the open claims judged with
    them, the decided ones' p kept, Holm."""
    claims = d.shape[0]
    verdict, seeds, p = [0] * claims, [design.looks[-1]] * claims, [1.0] * claims
    for n in design.looks:
        open_ = [i for i in range(claims) if verdict[i] == 0]
        alone = [evidence(design, d[i, :n if verdict[i] == 0 else seeds[i]], None, ">") for i in range(claims)]
        priors = shared_priors(alone) if shared else None
        lean = {}
        for i in open_:
            p[i], lean[i] = claim_p([evidence(design, d[i, :n], None, ">", priors=priors)])
        adjusted = holm(p)
        for i in open_:
            if adjusted[i] <= design.alpha:
                verdict[i], seeds[i] = (1 if lean[i] else -1), n
    return verdict, seeds


def shared_variance(studies: int, design: Design) -> None:
    """Section 8 (module docstring)."""
    claims = 8
    print(f"\n8. Shared variance, a study of {claims} claims with Holm, {studies} studies per case: alone, limma "
          f"(d0 uncapped), shared (the product: d0 <= {PRIOR_WEIGHT:g} x d_g)")
    print(f"   {'case':34} {'rule':6} {'any false verdict':>26} {'false, high-variance claims':>28}  agree")
    sds = {"equal variances": np.ones(claims), "half the claims at 4x variance": np.repeat([1.0, 2.0], claims // 2),
           "one claim at 4x variance": np.r_[np.ones(claims - 1), 2.0],
           "one claim at 16x variance": np.r_[np.ones(claims - 1), 4.0]}
    for name, sd in sds.items():
        d = np.random.default_rng(81).standard_normal((studies, claims, MAX_SEEDS)) * sd[None, :, None]
        high = sd > 1
        for rule in ("alone", "limma", "shared"):
            verdict, _ = many_claims_shared(design, d, rule)
            same = sum(product_many(design, d[i], rule == "shared")[0] == list(verdict[i])
                       for i in range(100)) if rule != "limma" else None
            agree = f"{same}/100" if same is not None else "-"
            wrong_high = rate(int((verdict[:, high] != 0).sum()), int(studies * high.sum())) if high.any() else "-"
            wrong_any = rate(int((verdict != 0).any(axis=1).sum()), studies)
            print(f"   {name:34} {rule:6} {wrong_any:>26} {wrong_high:>28}  {agree}")
    print(f"   {'effect 2 SD on every claim':34} {'rule':6} {'power':>8} {'mean seeds':>10} {'p90':>4}  agree")
    for name, sd in sds.items():
        d = 2.0 * sd[None, :, None] + np.random.default_rng(82).standard_normal((studies, claims, MAX_SEEDS)) \
            * sd[None, :, None]
        for rule in ("alone", "limma", "shared"):
            verdict, seeds = many_claims_shared(design, d, rule)
            same = sum(product_many(design, d[i], rule == "shared") == (list(verdict[i]), list(seeds[i]))
                       for i in range(100)) if rule != "limma" else None
            agree = f"{same}/100" if same is not None else "-"
            print(f"   {name:34} {rule:6} {(verdict == 1).mean():>8.4f} {seeds.mean():>10.2f} "
                  f"{np.percentile(seeds, 90):>4g}  {agree}")


def level(studies: int, design: Design) -> None:
    """Section 9 (module docstring): issue 51's cases."""
    print(f"\n9. Issue 51's cases, {studies} studies each (nominal alpha {ALPHA:g}); shared variance: alone, "
          f"capped (before issue 51: d0 <= d_g), shared (the product: d0 <= {PRIOR_WEIGHT:g} x d_g, never below "
          "its own variance)")
    cases = {"(a) 6 claims at 2 SD, 2 null at 9x variance": (np.r_[np.ones(6), 3.0, 3.0], np.r_[np.full(6, 2.0), 0, 0]),
             "(b) 3 claims null, one at 9x variance": (np.r_[1.0, 1.0, 3.0], np.zeros(3)),
             "(b) 1 claim at 5 SD, 3 null, one at 4x": (np.r_[1.0, 1.0, 1.0, 2.0], np.r_[5.0, 0, 0, 0]),
             "(b) 3 claims at 2 SD, 2 null at 9x": (np.r_[1.0, 1.0, 1.0, 3.0, 3.0], np.r_[2.0, 2.0, 2.0, 0, 0])}
    print(f"   {'case':44} {'rule':6} {'family-wise error, null claims':>30} {'power':>6} {'seeds/claim':>11}  agree")
    for name, (sd, effect) in cases.items():
        d = effect[None, :, None] + np.random.default_rng(91).standard_normal((studies, sd.size, MAX_SEEDS)) \
            * sd[None, :, None]
        null = effect == 0
        for rule in ("alone", "capped", "shared"):
            verdict, seeds = many_claims_shared(design, d, rule)
            same = sum(product_many(design, d[i], rule == "shared") == (list(verdict[i]), list(seeds[i]))
                       for i in range(100)) if rule != "capped" else None
            power = f"{(verdict[:, ~null] == 1).mean():.3f}" if (~null).any() else "-"
            print(f"   {name:44} {rule:6} {rate(int((verdict[:, null] != 0).any(axis=1).sum()), studies):>30} "
                  f"{power:>6} {seeds.mean():>11.2f}  {f'{same}/100' if same is not None else '-'}")
    rng = np.random.default_rng(93)
    named = min(studies, 2000)
    print("   one claim (normal seeds, SD 1, no effect); outlying seeds named by the product's code "
          f"(diverged.outlying) on the first {named} studies, at the look each stopped")
    clean = rng.standard_normal((studies, MAX_SEEDS))
    bad = rng.random((studies, MAX_SEEDS)) < 0.1
    one = np.arange(MAX_SEEDS)[None, :] == rng.integers(0, MAX_SEEDS, studies)[:, None]  # exactly one of the ten
    for name, d in (("normal, no outlier", clean), ("(c) one seed in ten at +5 SD", clean + 5.0 * bad),
                    ("(c) exactly one of the ten seeds at +5 SD", clean + 5.0 * one)):
        verdict, seeds = sequential(design, d)
        flagged = np.array([bool(evidence(design, d[i, :seeds[i]], None, ">").outlying) for i in range(named)])
        wrong = verdict[:named] != 0
        print(f"   {name:44} false verdicts {rate(int((verdict != 0).sum()), studies)}; an outlying seed named "
              f"{flagged.mean():.3f} (of the false verdicts {flagged[wrong].mean() if wrong.any() else 0:.3f})")
    skew = np.exp(rng.standard_normal((studies, MAX_SEEDS))) - math.exp(0.5)  # mean 0: the null of A - B < 0
    verdict, _ = sequential(design, -skew)  # "A - B < 0" on d is "> 0" on -d: +1 is a false "holds"
    print(f"   {'(d) A - B < 0, additive lognormal sigma 1':44} false 'holds' "
          f"{rate(int((verdict == 1).sum()), studies)} (nominal {ALPHA / 2:g}), "
          f"any false verdict {rate(int((verdict != 0).sum()), studies)}")


def max_evalue(n: int, effect: float) -> float:
    """The largest likelihood ratio of the scale-invariant statistic (the direction of the sample) between a
    mean of `effect` SDs and 0, at the most favourable sample (every seed equal): any scale-invariant e-value
    for this alternative is at most this."""
    shift = effect * math.sqrt(n)
    top = integrate.quad(lambda r: r ** (n - 1) * math.exp(-((r - shift) ** 2) / 2), 0, np.inf)[0]
    bottom = integrate.quad(lambda r: r ** (n - 1) * math.exp(-(r ** 2) / 2), 0, np.inf)[0]
    return top / bottom


def judged(design: Design, a: np.ndarray, b: np.ndarray | None, relation: str, scale: float, shift: float,
           raw: bool = False) -> int:
    """+1 holds, -1 fails, 0 undecided: one claim (one check) judged look by look by the product's code;
    `raw`: on the raw values (the rule before issue 41)."""
    kind = VALUE if b is None else RATIO
    for n in design.looks:
        bn = b[:n] if b is not None else None
        if raw:
            check = _linear(design, a[:n], bn, relation, scale, shift, kind if b is None else DIFFERENCE)
        else:
            check = evidence(design, a[:n], bn, relation, scale, shift, kind)
        p, holds = claim_p([check])
        if p <= design.alpha:
            return 1 if holds else -1
    return 0


def skewed(studies: int, design: Design) -> None:
    """Section 6 (module docstring)."""
    rng = np.random.default_rng(41)
    half = f"nominal {ALPHA / 2:g} / {ALPHA:g}"

    def line(name: str, verdicts: list[int], extra: str = "") -> None:
        v = np.array(verdicts)
        print(f"   {name:44} holds {rate(int((v == 1).sum()), len(v))}  any {rate(int((v != 0).sum()), len(v))}"
              + extra)

    print(f"\n6. Perplexity-shaped data, {studies} studies per case, false 'holds' / any false verdict ({half})")
    for sigma in (0.25, 0.5, 1.0):
        c = 30.0
        logs = rng.normal(math.log(c), sigma, (studies, MAX_SEEDS))
        line(f"bound A < {c:g}, lognormal sigma {sigma:g}",
             [judged(design, np.exp(row), None, "<", 1.0, c) for row in logs])
        raw = np.exp(logs - sigma**2 / 2)  # arithmetic mean at the bound: the raw rule's own null
        line("  before (raw t-test), mean at the bound", [judged(design, row, None, "<", 1.0, c, raw=True)
                                                          for row in raw])
        seed = rng.normal(math.log(c), 0.3, (studies, MAX_SEEDS))  # what the two rows share by seed
        b = np.exp(seed + rng.normal(0, sigma, (studies, MAX_SEEDS)))
        a = 0.95 * np.exp(seed + rng.normal(0, sigma, (studies, MAX_SEEDS)))
        line(f"ratio A < 0.95 x B, lognormal sigma {sigma:g}",
             [judged(design, a[i], b[i], "<", 0.95, 0.0) for i in range(studies)])
        line("  before (raw A - 0.95 B), mean ratio at 0.95",
             [judged(design, a[i], b[i], "<", 0.95, 0.0, raw=True) for i in range(studies)])
    seed = rng.normal(math.log(30.0), 0.3, (studies, MAX_SEEDS))
    b = np.exp(seed + rng.normal(0, 0.05, (studies, MAX_SEEDS)))
    a = 0.95 * np.exp(seed + rng.normal(0, 0.05, (studies, MAX_SEEDS)))
    bad = rng.random((studies, MAX_SEEDS)) < 0.1
    side = rng.random((studies, MAX_SEEDS)) < 0.5
    a, b = np.where(bad & side, 3 * a, a), np.where(bad & ~side, 3 * b, b)
    line("ratio A < 0.95 x B, one seed in ten 3x off", [judged(design, a[i], b[i], "<", 0.95, 0.0)
                                                         for i in range(studies)])
    base = np.round(30.0 + rng.normal(0, 0.5, (studies, MAX_SEEDS)), 1)
    tied = np.round(base + rng.normal(0, 0.06, (studies, MAX_SEEDS)), 1)  # ties by rounding: often equal
    line("difference A < B, values rounded (ties)", [judged(design, tied[i] - base[i], None, "<", 1.0, 0.0)
                                                     for i in range(studies)],
         f"  (the first look's 2 differences tie: {(np.diff(tied[:, :2] - base[:, :2], axis=1) == 0).mean():.2f})")
    longer = Design(tuple(Decide(max_seeds=18).looks()), ALPHA)
    d = rng.standard_normal((studies, 18))
    first = [judged(design, row[:MAX_SEEDS], None, ">", 1.0, 0.0) for row in d]
    again = [v if v else judged(longer, row, None, ">", 1.0, 0.0) for v, row in zip(first, d)]
    line("design locked (max_seeds 10; a change refused)", first)
    line("design changed on resume (undecided: to 18)", again)


def early_stops(studies: int, design: Design) -> None:
    """Section 7 (module docstring): vectorised, as sections 1-2."""
    rng = np.random.default_rng(43)
    print("\n7. Early stops: mean reported effect / true effect among decided claims (by stopping look); coverage")
    for effect in (0.5, 1.0, 2.0, 5.0):
        d = draw(studies, effect, "normal", rng)
        verdict, seeds = sequential(design, d)
        estimate = np.array([d[i, :n].mean() for i, n in enumerate(seeds)])
        decided = verdict != 0
        by_look = ", ".join(f"{n}: {estimate[decided & (seeds == n)].mean() / effect:.2f}"
                            for n in design.looks if (decided & (seeds == n)).sum() >= 20)
        covered = sum(evidence(design, d[i, :seeds[i]], None, ">").low <= effect
                      <= evidence(design, d[i, :seeds[i]], None, ">").high for i in np.flatnonzero(decided)[:500])
        ratio = estimate[decided].mean() / effect
        print(f"   effect {effect:g}: decided {decided.mean():.3f}, reported/true {ratio:.2f} "
              f"(by look {by_look}); interval covers the truth {covered / min(500, decided.sum()):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--studies", type=int, default=10_000)
    parser.add_argument("--no-evalue", action="store_true")
    parser.add_argument("--skewed", type=int, default=2000, help="studies per case of section 6 (0: none)")
    parser.add_argument("--only-skewed", action="store_true", help="section 6 alone")
    parser.add_argument("--only-shared", action="store_true", help="section 8 alone")
    parser.add_argument("--only-level", action="store_true", help="section 9 alone (issue 51's cases)")
    args = parser.parse_args()
    started = time.perf_counter()
    rng = np.random.default_rng(7)
    looks = tuple(Decide().looks())
    design = Design(looks, ALPHA)
    if args.only_level:
        level(args.studies, design)
        print(f"\n({time.perf_counter() - started:.1f} s)")
        return
    if args.only_shared:
        shared_variance(args.studies, design)
        print(f"\n({time.perf_counter() - started:.1f} s)")
        return
    if args.only_skewed:
        early_stops(args.studies, design)
        skewed(args.skewed, design)
        print(f"\n({time.perf_counter() - started:.1f} s)")
        return
    print(f"Design: looks at {list(looks)} seeds, alpha = {ALPHA}, first look's weight {design.first_weight:g}; "
          f"nominal one-sided level per look {[round(design.nominal(n), 5) for n in looks]}; "
          f"{args.studies} studies per setting\n")

    print("1. No effect: false verdicts (holds or fails), rate [95% CI]")
    for tails in ("normal", "t3"):
        d = draw(args.studies, 0.0, tails, rng)
        verdict, seeds = sequential(design, d)
        agree = sum(product(design, d[i]) == (verdict[i], seeds[i]) for i in range(min(300, len(d))))
        naive_verdict, _ = naive(d)
        print(f"   {tails:6}  sequential {rate(int((verdict != 0).sum()), len(d))} (nominal {ALPHA}), "
              f"mean seeds {seeds.mean():.2f}; agree {agree}/{min(300, len(d))}; "
              f"naive 'add a seed until p < 0.05' {rate(int((naive_verdict != 0).sum()), len(d))}; "
              f"fixed 3/5/10 {' / '.join(f'{(fixed(d, n) != 0).mean():.4f}' for n in (3, 5, 10))}")

    print("\n2. Effects (normal): power (declared to hold) and seeds trained")
    print(f"   {'effect':>6}  {'sequential power':>16}  {'mean seeds':>10}  {'p90 seeds':>9}  "
          f"{'fixed 3':>7}  {'fixed 5':>7}  {'fixed 10':>8}  agree")
    for effect in (0.5, 1.0, 2.0, 5.0, 10.0, 20.0):
        d = draw(args.studies, effect, "normal", rng)
        verdict, seeds = sequential(design, d)
        agree = sum(product(design, d[i]) == (verdict[i], seeds[i]) for i in range(min(300, len(d))))
        print(f"   {effect:>6g}  {(verdict == 1).mean():>16.4f}  {seeds.mean():>10.2f}  "
              f"{np.percentile(seeds, 90):>9g}  " + "  ".join(f"{(fixed(d, n) == 1).mean():>7.4f}"
                                                         for n in (3, 5)) + f"  {(fixed(d, 10) == 1).mean():>8.4f}"
              + f"  {agree}/{min(300, len(d))}")

    print("\n3. Designs compared (decide: min_seeds, batch; first look's weight): one claim, and a study of 8 "
          "claims with Holm (section 4); power / mean seeds per claim at each effect")
    for decide, weight in ((Decide(), 1.0), (Decide(), 2.0), (Decide(), 4.0), (Decide(min_seeds=3), 2.0),
                           (Decide(min_seeds=3, batch=1), 2.0), (Decide(min_seeds=2, batch=1), 2.0)):
        other = Design(tuple(decide.looks()), ALPHA, first_weight=weight)
        cells = []
        for effect in (0.0, 1.0, 2.0, 5.0, 20.0):
            one, seeds = sequential(other, draw(args.studies, effect, "normal", np.random.default_rng(11)))
            many, many_seeds = many_claims(other, effect + np.random.default_rng(12).standard_normal(
                (args.studies // 4, 8, MAX_SEEDS)))
            if effect == 0:
                cells.append(f"null {(one != 0).mean():.3f} | {(many != 0).any(axis=1).mean():.3f}")
            else:
                cells.append(f"{effect:g}: {(one == 1).mean():.2f}/{seeds.mean():.2f} | "
                             f"{(many == 1).mean():.2f}/{many_seeds.mean():.2f}")
        print(f"   looks {decide.looks()} weight {weight:g}: " + "; ".join(cells))

    print("\n4. A study of 8 claims, each on its own rows, Holm across them (as kernel_size's 8 claims)")
    claims = 8
    d = rng.standard_normal((args.studies, claims, MAX_SEEDS))
    verdict, seeds = many_claims(design, d)
    print(f"   no effect: studies with any false verdict {rate(int((verdict != 0).any(axis=1).sum()), args.studies)}, "
          f"seeds per claim {seeds.mean():.2f}")
    for effect in (2.0, 5.0, 10.0, 20.0):
        verdict, seeds = many_claims(design, effect + rng.standard_normal((args.studies, claims, MAX_SEEDS)))
        print(f"   effect {effect:g} on every claim: claims decided {(verdict == 1).mean():.4f}, seeds per claim mean "
              f"{seeds.mean():.2f}, p90 {np.percentile(seeds, 90):g}")

    if not args.no_evalue:
        print("\n5. The largest possible scale-invariant e-value (needs >= 20 to decide at alpha 0.05)")
        for n in (2, 3, 4):
            print(f"   {n} seeds: " + ", ".join(f"effect {effect:g} SD: {max_evalue(n, effect):.3g}"
                                              for effect in (1.0, 2.0, 5.0)))
    early_stops(args.studies, design)
    if args.skewed:
        skewed(args.skewed, design)
    shared_variance(args.studies, design)
    level(args.studies, design)
    print(f"\n({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()

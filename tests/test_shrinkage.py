"""The shared variance (orchestrator/judging/shrinkage.py, Smyth 2004's moderated t): the prior's fit against
hand-computed values and a direct implementation of limma's moment equations, its limits (d0 infinite, d0
near 0, too few comparisons), and the `decide: {shared_variance: true}` option through the claims: it
decides a study of large effects at fewer seeds than each claim alone, and is recorded with the design."""

import math

import numpy as np
import pytest
from scipy import optimize, special
from test_decisions import BELOW, _frame, _study

from orchestrator.judging.claims import evaluate_claims
from orchestrator.judging.decision import Design, evidence, one_sided_p, shared_priors
from orchestrator.judging.design import _record, same, words
from orchestrator.judging.shrinkage import NONE, PRIOR_WEIGHT, Prior, fit, trigamma_inverse
from orchestrator.study.model import Decide


def test_trigamma_inverse_at_known_values():
    assert trigamma_inverse(math.pi ** 2 / 6) == pytest.approx(1.0, rel=1e-8)  # trigamma(1) = pi^2 / 6
    assert trigamma_inverse(math.pi ** 2 / 2) == pytest.approx(0.5, rel=1e-8)  # trigamma(1/2) = pi^2 / 2
    for y in (0.05, 0.7, 3.0, 40.0, 2000.0):
        assert trigamma_inverse(float(special.polygamma(1, y))) == pytest.approx(y, rel=1e-6)


def test_posterior_variance_and_degrees_of_freedom_by_hand():
    assert PRIOR_WEIGHT == 0.5
    small = Prior(scale=2.0, dof0=0.5, pooled=30.0)  # d0 below half the comparison's own df: used as fitted
    assert small.variance(1.0, 2) == pytest.approx((0.5 * 2.0 + 2 * 1.0) / 2.5) and small.dof(2, 1.0) == 2.5
    large = Prior(scale=2.0, dof0=4.0, pooled=30.0)  # d0 above it: weighs half its 2 df (PRIOR_WEIGHT)
    assert large.variance(1.0, 2) == pytest.approx((1 * 2.0 + 2 * 1.0) / 3) and large.dof(2, 1.0) == 3.0
    infinite = Prior(2.0, math.inf, 24.0)
    assert infinite.variance(1.0, 4) == pytest.approx((2 * 2.0 + 4 * 1.0) / 6) and infinite.dof(4, 1.0) == 6.0
    assert Prior(2.0, 100.0, 4.0).dof(3, 1.0) == 4.0  # capped at the pooled degrees of freedom (limma)
    assert NONE.variance(7.0, 3) == 7.0 and NONE.dof(3, 7.0) == 3


@pytest.mark.parametrize("s2", [2.0001, 7.0, 50.0])
def test_a_noisy_comparison_is_never_pulled_below_its_own_variance(s2):
    """The prior may only pull a quiet comparison up: above its scale, a comparison keeps its own variance and
    its own degrees of freedom (issue 51: two null claims at 9x the others' variance had a family-wise error
    of 0.108 when pulled down)."""
    for prior in (Prior(2.0, math.inf, 24.0), Prior(2.0, 3.0, 24.0), Prior(2.0, 0.7, 24.0)):
        assert prior.variance(s2, 3) == s2 and prior.dof(3, s2) == 3
        assert prior.variance(0.5, 3) > 0.5 and prior.dof(3, 0.5) > 3  # a quiet one: pulled up, more df
    d = np.array([0.0, 3.0, -3.0, 1.0])  # s2 = 6.25 against a prior scale of 1: the plain t-test's p
    assert one_sided_p(d, prior=Prior(1.0, math.inf, 40.0)) == pytest.approx(one_sided_p(d))


def test_equal_variances_give_an_infinite_prior_df_and_the_unbiased_pooled_scale():
    """s_g^2 all 1 on 2 df: no spread, d0 = inf; E[log s^2] = log sigma^2 + digamma(1) - log(1) = log sigma^2 -
    gamma, so s0^2 = exp(gamma) (Euler's constant) and the pooled df 3 x 2."""
    prior = fit([1.0, 1.0, 1.0], 2)
    assert math.isinf(prior.dof0) and prior.scale == pytest.approx(math.exp(np.euler_gamma)) and prior.pooled == 6


def _direct(s2: np.ndarray, d: float) -> tuple[float, float]:
    """limma's moment equations solved directly (brentq, not Newton): trigamma(d0/2) = the excess variance of
    log s^2, s0^2 from E[log s^2] = log s0^2 + digamma(d/2) - log(d/2) - digamma(d0/2) + log(d0/2)."""
    z = np.log(s2)
    excess = z.var(ddof=1) - special.polygamma(1, d / 2)
    half = optimize.brentq(lambda y: special.polygamma(1, y) - excess, 1e-8, 1e8, xtol=1e-14, rtol=1e-14)
    d0 = 2 * half
    log_s0 = z.mean() - special.digamma(d / 2) + math.log(d / 2) + special.digamma(d0 / 2) - math.log(d0 / 2)
    return math.exp(log_s0), d0


def test_the_fit_matches_a_direct_solution_of_the_moment_equations():
    s2 = np.array([0.05, 0.3, 1.0, 2.5, 9.0, 0.7])
    prior = fit(s2, 3)
    scale, d0 = _direct(s2, 3)
    assert prior.dof0 == pytest.approx(d0, rel=1e-6) and prior.scale == pytest.approx(scale, rel=1e-6)
    assert prior.pooled == 18


def test_the_fit_recovers_a_known_prior_and_a_wide_spread_gives_d0_near_zero():
    rng = np.random.default_rng(3)
    truth = 6.0 * 1.5 / rng.chisquare(6.0, 4000)  # sigma_g^2: d0 = 6, s0^2 = 1.5
    s2 = truth * rng.chisquare(3, 4000) / 3
    prior = fit(s2, 3)
    assert prior.dof0 == pytest.approx(6.0, rel=0.25) and prior.scale == pytest.approx(1.5, rel=0.1)
    wide = fit(np.exp(rng.normal(0, 6, 50)), 3)  # variances over many orders of magnitude: each keeps its own
    assert wide.dof0 < 0.5 and wide.variance(4.0, 3) == pytest.approx(4.0, rel=0.2)


def test_too_few_comparisons_or_ties_mean_no_shrinkage():
    assert fit([1.0, 2.0], 1) is NONE
    assert fit([0.0, 0.0, 1.0, 2.0], 1) is NONE  # ties (zero variance) are left out of the fit
    d = np.array([0.4, 0.5])
    assert one_sided_p(d, prior=Prior(1.0, math.inf, 10)) != one_sided_p(d)  # a tie's variance is left out, not 0
    assert one_sided_p(np.array([0.5, 0.5]), prior=Prior(1.0, math.inf, 10)) == (1.0, 1.0)  # no test on a tie


def test_the_moderated_p_is_the_t_test_with_the_posterior_variance():
    design = Design((2, 4))
    d = np.array([1.0, 1.4, 0.8, 1.2])
    alone = [evidence(design, d, None, ">")] + [evidence(design, d * k, None, ">") for k in (0.5, 2.0, 3.0)]
    priors = shared_priors(alone)
    assert set(priors) == {2, 4}
    prior = priors[4]
    assert prior == fit([float((d * k).var(ddof=1)) for k in (1.0, 0.5, 2.0, 3.0)], 3)
    s2 = prior.variance(float(d.var(ddof=1)), 3)
    t = d.mean() / math.sqrt(s2 / 4)
    assert one_sided_p(d, prior=prior)[1] == pytest.approx(special.stdtr(prior.dof(3, float(d.var(ddof=1))), t))
    shared = evidence(design, d, None, ">", priors=priors)
    assert shared.shared and not alone[0].shared


def test_shared_variance_decides_a_study_of_large_effects_at_fewer_seeds():
    """Eight claims "v_k below the baseline", each on its own row, every paired difference 2 seed SDs below
    0: judged through evaluate_claims on the same per-seed values, the claims sharing their variance are
    decided at fewer seeds in all than the claims alone (over three studies: the prior pulls a quiet claim's
    variance up, so one study alone may go either way), every one holding."""
    seeds, spread = 10, 0.1
    variants = [{"label": "base", "baseline": True, "set": {"train.steps": 30}}] + [
        {"label": f"v{k}", "set": {"train.steps": 31 + k}} for k in range(8)]
    claims = [{**BELOW, "id": f"c{k}", "variant": f"v{k}", "than": "base"} for k in range(8)]
    decide = {"min_seeds": 2, "max_seeds": 10, "batch": 2}
    total_alone = total_shared = 0
    for stream in (5, 6, 7):
        rng = np.random.default_rng(stream)
        values = {"base": list(6.0 + rng.normal(0, 0.3, seeds))}
        for k in range(8):
            values[f"v{k}"] = list(np.array(values["base"]) - 2 * spread + rng.normal(0, spread, seeds))
        frame = _frame(values)
        alone = evaluate_claims(_study(claims, decide=decide, variants=variants), frame)
        shared = evaluate_claims(_study(claims, decide={**decide, "shared_variance": True}, variants=variants), frame)
        assert all(r.verdict == "holds" for r in shared), [r.reason for r in shared]
        assert all(r.deciding.evidence.shared for r in shared) and not any(r.deciding.evidence.shared for r in alone)
        total_alone += sum(r.seeds for r in alone)
        total_shared += sum(r.seeds for r in shared)
    assert total_shared < total_alone, (total_shared, total_alone)


def test_the_option_is_part_of_the_recorded_design():
    on, off = Decide(shared_variance=True), Decide()
    assert not same(on, off) and same(on, Decide(shared_variance=True))
    assert "shared variance" in words(on) and "shared" not in words(off)
    assert '"shared_variance": true' in _record(on) and "shared_variance" not in _record(off)
    with pytest.raises(Exception, match="shared_variance"):
        Decide(shared_variance="yes")

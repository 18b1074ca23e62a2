"""The claims' decision rule (orchestrator/judging/decision.py) and the verdicts built on it (claims.py):
under no effect its false-verdict rate on a few thousand simulated studies is within the nominal level (and
the same check fails on the naive "add a seed until p < 0.05"); a large effect is decided at the minimum
seeds; an equivalence claim holds only with its interval inside the margin; a claim is judged at the largest
planned look its rows have finished, on the first seeds of the design's order; claims seeds cannot decide
say so before anything runs. Per-seed results are drawn here (no training): the rule only reads numbers."""

import math

import numpy as np
import pandas as pd
import pytest
import report_study
import yaml
from scipy import stats

from orchestrator import StudyError, parse_study
from orchestrator.judging.claims import claim_decidable, decision_summary, evaluate_claims, rows_needing_seeds
from orchestrator.judging.decision import Design, claim_p, evidence, one_sided_p
from orchestrator.study.model import Decide

ALPHA = 0.05
LOOKS = tuple(Decide().looks())  # 2, 4, 6, 8, 10


def _within_nominal(false_verdicts: int, studies: int, alpha: float = ALPHA) -> bool:
    """The rate is at most alpha, up to simulation noise (a one-sided 99.9% margin of the binomial)."""
    return false_verdicts / studies <= alpha + 3.1 * math.sqrt(alpha * (1 - alpha) / studies)


def _sequential(design: Design, d: np.ndarray) -> tuple[int, int]:
    """(verdict +1 holds / -1 fails / 0, seeds) of the product's rule, look by look, as `run --decide`
    takes them: stop at the first look where the claim is decided."""
    for n in design.looks:
        p, holds = claim_p([evidence(design, d[:n], None, ">")])
        if p <= design.alpha:
            return (1 if holds else -1), n
    return 0, design.looks[-1]


def _naive(d: np.ndarray) -> np.ndarray:
    """Per study (row): 1 where "add a seed until the two-sided t-test's p < 0.05" (2 to 10 seeds) decides."""
    decided = np.zeros(d.shape[0], dtype=bool)
    for n in range(2, d.shape[1] + 1):
        decided |= stats.ttest_1samp(d[:, :n], 0.0, axis=1).pvalue < ALPHA
    return decided


def _ever(design: Design, d: np.ndarray) -> int:
    """The verdict a study reaches at some look: its sequential p only falls as looks are added, so the claim
    is decided at some look exactly where it is decided with every look taken (the direction: of that p)."""
    p, holds = claim_p([evidence(design, d, None, ">")])
    return (1 if holds else -1) if p <= design.alpha else 0


def test_under_no_effect_false_verdicts_stay_within_alpha_and_the_naive_rule_does_not():
    studies = 3000
    d = np.random.default_rng(1).standard_normal((studies, LOOKS[-1]))
    design = Design(LOOKS, ALPHA)
    verdicts = [_ever(design, row) for row in d]
    assert all(_ever(design, row) == _sequential(design, row)[0] for row in d[:100])
    false = sum(v != 0 for v in verdicts)
    assert _within_nominal(false, studies), false / studies
    assert {-1, 1} <= set(verdicts)  # both false verdicts occur: the rule is two-sided, not vacuous
    naive = int(_naive(d).sum())
    assert not _within_nominal(naive, studies), naive / studies  # the check catches the naive rule (~0.2)


def test_a_large_effect_is_decided_at_the_minimum_seeds():
    design = Design(LOOKS, ALPHA)
    rng = np.random.default_rng(2)
    seeds = [_sequential(design, 40.0 + rng.standard_normal(LOOKS[-1])) for _ in range(200)]
    assert all(verdict == 1 for verdict, _ in seeds)
    assert np.mean([n == LOOKS[0] for _, n in seeds]) > 0.9  # 40 SDs: almost always at 2 seeds
    # A small effect is not: it needs more looks (and sometimes every one).
    small = [_sequential(design, 1.0 + rng.standard_normal(LOOKS[-1]))[1] for _ in range(200)]
    assert np.mean(small) > 6


def test_one_look_is_the_paired_t_test_with_its_interval():
    rng = np.random.default_rng(3)
    a, b = rng.normal(6.0, 0.05, 4), rng.normal(6.1, 0.05, 4)
    check = evidence(Design((4,), ALPHA), a, b, "<")
    two_sided = stats.ttest_rel(a, b).pvalue
    assert claim_p([check])[0] == pytest.approx(two_sided, rel=1e-9)
    interval = stats.t.interval(1 - ALPHA, 3, loc=(a - b).mean(), scale=stats.sem(a - b))
    assert (check.low, check.high) == pytest.approx(interval, rel=1e-9)
    assert check.kind == "difference" and check.effect == pytest.approx((a - b).mean())


def test_a_ratio_of_positive_values_is_tested_on_the_log_scale():
    """Perplexities are positive: the ratio check is the paired t-test of log a - log b against log 0.95, its
    effect the geometric mean of the per-seed ratios, its interval the log scale's t-interval exponentiated."""
    rng = np.random.default_rng(4)
    a, b = rng.normal(5.8, 0.04, 5), rng.normal(6.0, 0.04, 5)
    check = evidence(Design((5,), ALPHA), a, b, "<", scale=0.95)
    logs = np.log(a) - np.log(b)
    assert check.kind == "ratio" and check.log and check.bound == 0.95
    assert check.effect == pytest.approx(math.exp(logs.mean()), rel=1e-12)
    assert check.p_right == pytest.approx(stats.ttest_1samp(logs - math.log(0.95), 0.0, alternative="less").pvalue)
    interval = stats.t.interval(1 - ALPHA, 4, loc=logs.mean(), scale=stats.sem(logs))
    assert (check.low, check.high) == pytest.approx(tuple(np.exp(interval)), rel=1e-9)
    bound = evidence(Design((5,), ALPHA), a, None, "<", shift=6.0)  # a bound: the geometric mean against 6
    assert bound.log and bound.p_right == pytest.approx(
        stats.ttest_1samp(np.log(a), math.log(6.0), alternative="less").pvalue)


def test_a_ratio_interval_is_the_set_of_ratios_the_test_does_not_reject():
    """Values that are not all positive (no log scale): Fieller's interval, at each end of which the paired
    t-test of a - r b sits exactly at the nominal level."""
    rng = np.random.default_rng(4)
    a, b = -rng.normal(5.8, 0.04, 5), -rng.normal(6.0, 0.04, 5)
    design = Design((5,), ALPHA)
    check = evidence(design, a, b, ">", scale=0.95)
    assert check.kind == "ratio" and not check.log and check.low < a.mean() / b.mean() < check.high
    for end in (check.low, check.high):
        up, down = one_sided_p(a - end * b)
        assert min(up, down) == pytest.approx(ALPHA / 2, rel=1e-6)


def test_the_sequential_p_is_valid_whatever_looks_are_taken():
    """P(sequential p <= u) <= u under the null, stopping at the first look or taking all of them."""
    design = Design(LOOKS, ALPHA)
    rng = np.random.default_rng(5)
    d = rng.standard_normal((2000, LOOKS[-1]))
    first = np.array([evidence(design, row[:2], None, ">").p_right for row in d])
    every = np.array([evidence(design, row, None, ">").p_right for row in d])
    assert (every <= first).all()  # more looks: the minimum only falls
    for u in (0.01, 0.05, 0.2):
        assert _within_nominal(int((every <= u).sum()), len(d), u)
    assert (first <= 0.05).mean() < 0.05  # one look of a five-look design is judged at its share


def test_zero_spread_is_no_test_never_a_p_of_zero():
    """Identical differences (exactly, or up to the rounding of the values they are made of) give no p."""
    design = Design(LOOKS, ALPHA)
    same = evidence(design, np.full(2, 3.0), np.full(2, 2.0), ">")
    assert same.tie and same.p_right == same.p_wrong == 1.0 and (same.low, same.high) == (-math.inf, math.inf)
    base = 30.0 + np.arange(4.0)
    rounded = evidence(design, base - 1e-9, base, "<")  # 1e-9 below on every seed: rounding noise only
    assert rounded.tie and rounded.p_right == 1.0
    spread = evidence(design, base - 1e-6 * np.arange(1.0, 5.0) ** 2, base, "<")  # a real (if tiny) spread
    assert not spread.tie


# --- claims of a study, judged on per-seed results ------------------------------------------------------------
def _study(claims: list[dict], decide: dict | None = None, **changes) -> "object":
    spec = yaml.safe_load(yaml.safe_dump(report_study.STUDY))
    spec.update(changes, expect=claims)
    if decide is not None:
        spec["decide"] = decide
    return parse_study(spec)


def _frame(values: dict[str, list[float]], column: str = "ppl_32", status: dict | None = None) -> pd.DataFrame:
    """One finished trial per (row, seed) with `column` = the listed values (seed i: the i-th value)."""
    rows = [{"label": label, "seed": seed, "status": (status or {}).get((label, seed), "FINISHED"), column: value}
            for label, per_seed in values.items() for seed, value in enumerate(per_seed)]
    return pd.DataFrame(rows)


BELOW = {"id": "below", "kind": "compare", "source": "test", "variant": "DAPE1x3-Kerple", "than": "baseline",
         "direction": "below", "metric": "ppl", "at": [32]}
WITHIN = {"id": "close", "kind": "compare", "source": "test", "variant": "DAPE1x3-Kerple", "than": "baseline",
          "within": 0.05, "metric": "ppl", "at": [32]}


def _pair(ratio: float, spread: float, seeds: int, rng) -> dict[str, list[float]]:
    base = 6.0 + rng.normal(0, 0.3, seeds)  # seed-to-seed variation shared by both rows (paired)
    return {"DAPE-Kerple": list(base), "DAPE1x3-Kerple": list(base * ratio + rng.normal(0, spread, seeds))}


def test_a_large_effect_on_a_study_is_decided_at_its_first_look():
    study = _study([BELOW], decide={"min_seeds": 2, "max_seeds": 10, "batch": 2})
    (result,) = evaluate_claims(study, _frame(_pair(0.9, 0.001, 2, np.random.default_rng(6))))
    assert result.verdict == "holds" and result.decided and result.seeds == 2 and result.looks == (2,)
    assert result.rows == {"DAPE-Kerple", "DAPE1x3-Kerple"} and not result.needs_seeds
    ev = result.deciding.evidence
    assert ev.kind == "difference" and ev.high < 0 and "claimed < 0" in result.effect()


@pytest.mark.parametrize("ratio, spread, verdict", [
    (0.97, 0.002, "holds"),  # tight, inside (0.95, 1.05)
    (0.951, 0.02, "inconclusive"),  # on the margin: the interval straddles 0.95
    (0.90, 0.002, "fails"),  # tight, wholly below the margin
])
def test_an_equivalence_claim_holds_only_with_its_interval_inside_the_margin(ratio, spread, verdict):
    study = _study([WITHIN])
    (result,) = evaluate_claims(study, _frame(_pair(ratio, spread, 5, np.random.default_rng(7))))
    assert result.verdict == verdict, result.reason
    ev = result.deciding.evidence
    assert ev.kind == "ratio" and "claimed in (0.95, 1.05)" in result.effect()
    inside = 0.95 < ev.low and ev.high < 1.05
    outside = ev.high < 0.95 or ev.low > 1.05
    assert inside == (verdict == "holds") and outside == (verdict == "fails")


def test_equivalence_holds_by_simulation_only_with_the_interval_inside():
    """Over many draws near the margin: every `holds` has its interval inside, every `fails` outside."""
    rng = np.random.default_rng(8)
    design = Design((5,), ALPHA)
    seen = set()
    for _ in range(400):
        ratio = rng.uniform(0.92, 0.98)
        b = 6.0 + rng.normal(0, 0.3, 5)
        a = b * ratio + rng.normal(0, 0.05, 5)
        checks = [evidence(design, a, b, ">", 0.95, kind="ratio"), evidence(design, a, b, "<", 1.05, kind="ratio")]
        p, holds = claim_p(checks)
        low, high = checks[0].low, checks[0].high
        verdict = "holds" if p <= ALPHA and holds else "fails" if p <= ALPHA else "inconclusive"
        seen.add(verdict)
        if verdict == "holds":
            assert 0.95 < low and high < 1.05
        if verdict == "fails":
            assert high < 0.95 or low > 1.05
    assert seen == {"holds", "fails", "inconclusive"}


def test_a_claim_is_judged_at_the_largest_planned_look_its_rows_finished():
    """Looks at 2, 4, 6: five seeds finished on both rows -> judged at 4 on seeds 0-3 (seed 4 waits for the
    look at 6); a failed seed stops the sequence where it is, and says so."""
    study = _study([BELOW], decide={"min_seeds": 2, "max_seeds": 6, "batch": 2}, seeds=[0, 1])
    values = _pair(0.99, 0.05, 5, np.random.default_rng(9))
    values["DAPE1x3-Kerple"][4] = 100.0  # seed 4 is not read at the look at 4: the verdict cannot see it
    (result,) = evaluate_claims(study, _frame(values))
    assert result.seeds == 4 and result.looks == (2, 4) and result.deciding.evidence.seeds == 4
    assert result.deciding.evidence.effect == pytest.approx(np.mean(np.subtract(values["DAPE1x3-Kerple"][:4],
                                                                                values["DAPE-Kerple"][:4])))
    failed = _frame(values, status={("DAPE-Kerple", 2): "FAILED"})
    (stopped,) = evaluate_claims(study, failed)
    assert stopped.seeds == 2 and "DAPE-Kerple · s2 FAILED" in stopped.reason
    one = _frame({label: v[:1] for label, v in values.items()})
    (waiting,) = evaluate_claims(study, one)
    assert waiting.verdict == "inconclusive" and not waiting.tested and waiting.needs_seeds
    assert rows_needing_seeds([waiting, stopped]) == {"DAPE-Kerple", "DAPE1x3-Kerple"}
    assert "waiting for seeds" in waiting.reason and "first look is at 2" in waiting.reason


def test_holm_over_a_sequential_study_counts_claims_not_judged_yet():
    """Two claims, the second's metric not logged yet: it counts as p = 1, so the first is corrected over 2
    (and is not decided early on a correction over 1 that later claims would undo). Without `decide`, the
    one-look study corrects over the claims that have a test, as before."""
    other = {**BELOW, "id": "at_64", "at": [64]}
    values = _pair(0.97, 0.01, 4, np.random.default_rng(10))
    sequential = _study([BELOW, other], decide={"min_seeds": 2, "max_seeds": 4, "batch": 2})
    first, second = evaluate_claims(sequential, _frame(values))
    assert not second.tested and "no finished trial logged the metric" in second.reason
    assert not second.needs_seeds  # seeds would not log the metric: not a claim to add seeds for
    assert first.tested and first.p_holm == pytest.approx(min(1.0, 2 * first.p))
    one_look, _ = evaluate_claims(_study([BELOW, other]), _frame(values))
    assert one_look.p_holm == pytest.approx(one_look.p)


def test_claims_seeds_cannot_decide_say_why_before_anything_runs():
    study = _study([{**BELOW, "min_seeds": 12}])
    assert "min_seeds (12) is above decide.max_seeds (10)" in claim_decidable(study, study.expect[0])
    assert claim_decidable(_study([BELOW]), _study([BELOW]).expect[0]) is None
    asha = _study([BELOW], scheduler={"type": "asha", "metric": "train_loss", "grace_period": 5})
    assert "stops trials early" in claim_decidable(asha, asha.expect[0])
    (result,) = evaluate_claims(asha, _frame(_pair(0.9, 0.01, 3, np.random.default_rng(11))))
    assert not result.decidable and result.decided and not result.needs_seeds


def test_decide_refuses_a_maximum_below_the_minimum():
    with pytest.raises(StudyError, match="max_seeds"):
        _study([BELOW], decide={"min_seeds": 4, "max_seeds": 3})


def test_the_command_lines_summary_counts_decided_claims_and_their_cost():
    rng = np.random.default_rng(12)
    study = _study([BELOW, {**BELOW, "id": "at_64", "at": [64]}],
                   decide={"min_seeds": 2, "max_seeds": 4, "batch": 2})
    results = evaluate_claims(study, _frame({"DAPE-Kerple": [6.0, 6.3], "DAPE1x3-Kerple": [5.4, 5.7001]}))
    assert [r.verdict for r in results] == ["holds", "inconclusive"], [r.reason for r in results]
    assert decision_summary(results, trials=4) == "1 of 2 claims decided (1 holds, 0 fail) on 4 trials; 1 undecided"
    one_seed = evaluate_claims(_study([BELOW]), _frame(_pair(0.9, 0.001, 1, rng)))
    assert decision_summary(one_seed) == ("0 of 1 claim decided (0 hold, 0 fail); 1 on 1 seed, untested "
                                          "(1 holds, 0 fail on the means)")


def test_the_interval_intersected_over_the_looks_covers_the_effect():
    """Over the planned looks taken, the intersected interval misses the true effect at most alpha of the time."""
    design = Design(LOOKS, ALPHA)
    d = 0.7 + np.random.default_rng(13).standard_normal((1500, LOOKS[-1]))
    missed = sum(not (check.low <= 0.7 <= check.high) for check in (evidence(design, row, None, ">") for row in d))
    assert _within_nominal(missed, len(d))


# --- the report: one line per claim at the top, the checks after the tables ------------------------------------
def _rendered(results) -> tuple[str, str]:
    from orchestrator.reporting import render_html, render_md
    from orchestrator.reporting.document import ReportDocument

    trials = pd.DataFrame({"label": ["DAPE-Kerple"], "seed": [0], "status": ["FINISHED"], "run_name": ["x · s0"],
                           "run_id": ["0123456789abcdef0123456789abcdef"], "trial_id": ["aaaa"]})
    document = ReportDocument(study_name="claims", description="", tracking_uri="file:///tmp/nowhere",
                              experiment_id="1", value_text="final value", trials=trials,
                              outside=pd.DataFrame(columns=["run_name", "status", "trial_id"]), claims=results)
    return render_md.render(document), render_html.render(document), document.no_tables_text()


def test_the_claims_read_at_a_glance_with_their_checks_after_the_tables():
    study = _study([BELOW, WITHIN])
    results = evaluate_claims(study, _frame(_pair(0.97, 0.002, 5, np.random.default_rng(14))))
    markdown, html, no_tables = _rendered(results)
    top = markdown[markdown.index("## Claims"):markdown.index("## Claims in detail")]
    lines = [line for line in top.splitlines() if line.startswith("| below") or line.startswith("| close")]
    assert len(lines) == 2  # one line per claim: verdict, effect [interval], seeds, source
    assert "**holds**" in lines[1] and "ratio 0.97" in lines[1] and "claimed in (0.95, 1.05)" in lines[1]
    assert "| 5 " in lines[1] and "| test " in lines[1] and "✓" not in top
    tables = markdown.index(no_tables)  # the tables' section (here: no table, said in a sentence)
    assert tables < markdown.index("## Claims in detail") < markdown.index("## Trials")  # details after the tables
    assert "✓ DAPE1x3-Kerple: ppl_32" in markdown.split("## Claims in detail")[1]
    assert html.index('id="claims"') < html.index('id="claim-details"')
    assert html.count("<details class=\"claim-holds\">") == 2  # collapsible, one per claim
    one = evaluate_claims(study, _frame(_pair(0.97, 0.002, 1, np.random.default_rng(14))))
    markdown, html, _ = _rendered(one)
    assert "*holds on 1 seed, untested*" in markdown and "**holds" not in markdown
    assert 'class="claim-untested"' in html and 'class="claim-holds' not in html  # never coloured like a pass


def test_an_outlying_seed_is_named_in_the_claim_and_judged_with():
    """A seed far from the others (diverged.outlying: externally studentized, Bonferroni at 0.01 over the
    seeds, from 5 seeds) is named in the claim's reason; the claim is judged with it, as measured."""
    rng = np.random.default_rng(21)
    base = 6.0 + rng.normal(0, 0.3, 6)
    values = {"DAPE-Kerple": list(base), "DAPE1x3-Kerple": list(base - 0.5 + rng.normal(0, 0.01, 6))}
    clean = evaluate_claims(_study([BELOW]), _frame(values))[0]
    assert clean.verdict == "holds" and clean.outlying == [] and "outlying" not in clean.reason
    values["DAPE1x3-Kerple"][3] += 0.3  # s3's difference ~30 SDs above the others': still below B
    (result,) = evaluate_claims(_study([BELOW]), _frame(values))
    assert result.verdict == "holds" and len(result.outlying) == 1 and result.outlying[0].startswith("s3, +")
    assert "an outlying seed (s3, +" in result.reason and "weighs on it: judged with it" in result.reason
    assert result.deciding.evidence.outlying[0][0] == 3


def test_outlying_needs_five_seeds_and_rarely_names_a_normal_seed():
    from orchestrator.judging.diverged import OUTLIER_LEVEL, outlying

    assert outlying(np.array([0.0, 0.1, -0.1, 9.0])) == []  # 4 seeds: never
    found = outlying(np.array([0.0, 0.1, -0.1, 0.05, 9.0]))
    assert [i for i, _ in found] == [4] and found[0][1] > 50
    rng = np.random.default_rng(22)
    named = sum(bool(outlying(rng.standard_normal(n))) for n in (5, 6, 8, 10) for _ in range(500))
    assert named / 2000 <= OUTLIER_LEVEL + 3.1 * math.sqrt(OUTLIER_LEVEL / 2000)

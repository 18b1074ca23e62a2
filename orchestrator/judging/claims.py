"""Verdicts on a study's claims (its `expect:` section) from the trials in the store.

A claim is a set of checks (orchestrator/study/claim_checks.py), each "left < right" (or ">") per seed, where
right is another row's metric times a scale plus a shift, or a constant. Its verdict:
- holds: every check is on its claimed side, significantly (the decision rule below);
- fails: some check is significantly on the wrong side;
- inconclusive: neither yet (not significant, or too few seeds: `min_seeds`, or a trial it needs did not
  finish, a length of `report.lengths` is not evaluated yet, a metric is missing; the reason says which).

The decision rule is decision.py's: an exact paired t-test by seed at planned looks, its error
spent over the looks, a claim holding where all its checks do (intersection-union) and failing where any
check is significantly the other way, and Holm's correction across the study's claims. Under no effect the
chance that a study declares any claim to hold or to fail wrongly is at most alpha (docs/deciding.md).
- With a `decide:` section (or `run --decide`): the looks are `Decide.looks()`, and a claim is judged at
  the largest planned look at or below the seeds finished on all its rows, reading the first n seeds of
  `Decide.seed_order`. Its sequential p-value only falls as looks are added, and so does Holm's, so a claim
  decided at an earlier look stays decided. Holm runs over every claim that seeds can decide (one not
  judged yet counts with p = 1), so that a claim judged early is not corrected over fewer claims.
- Without one, the study is one look at the seeds it has: the two-sided paired t-test, Holm over the claims
  that have a test. With one seed no test is possible: the verdict rests on the means and says so ("holds
  on 1 seed, untested": `ClaimResult.words`), never as the bare "holds" of a tested claim.

Every tested claim reports its effect (a difference, a ratio or a value, as the claim states it) with its
interval (two-sided, 1 - alpha, simultaneous over the planned looks; not corrected for the other claims),
the seeds it was judged at, and its p-values.

`claim_decidable` says, before anything runs, why seeds cannot decide a claim (a search's samples, ASHA's
early stopping, a `min_seeds` above the design's maximum); `ClaimResult.rows` names the rows a claim
reads, so that `run --decide` adds seeds only where an undecided claim needs them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

import dape_core.metric_names as names

from ..study import Study
from ..study.claim_checks import Check, Term, claim_checks, later_columns, study_rows
from ..study.model import Decide
from ..trial.protocol import ISOLATED_PREFIX
from .caveats import check_caveat
from .decision import DIFFERENCE, RATIO, VALUE, Design, Evidence, claim_p, evidence, shared_priors
from .diverged import describe, unusable
from .shrinkage import Prior
from .stats import ALPHA, format_p, holm

HOLDS, FAILS, INCONCLUSIVE = "holds", "fails", "inconclusive"
NOT_DECIDABLE = "not decidable by seeds"
MIN_TEST_SEEDS = 2  # the paired t-test needs two seeds (one degree of freedom): exact, if weak, from there


@dataclass
class CheckResult:
    text: str  # the measured values and the relation, e.g. "DAPE: ppl_512 = 5.999 < Kerple: ppl_512 = 6.746"
    holds: bool  # on the means
    p: float = math.nan  # sequential one-sided p that the check holds; NaN where no test ran
    evidence: Evidence | None = None  # effect, interval and both one-sided p-values, where a test ran
    relation: str = "<"
    quantity: tuple = ()  # (left term, right term): the checks of one quantity share its effect and interval
    reference: float = math.nan  # the mean of the right side's row (B), where it is a row: a difference's scale


@dataclass
class ClaimResult:
    claim: Any  # the study's claim model
    verdict: str = INCONCLUSIVE
    reason: str = ""
    seeds: int = 0  # the seeds it was judged on: with `decide`, the planned look
    checks: list[CheckResult] = field(default_factory=list)
    p: float = math.nan  # two-sided, of the claim (before Holm); NaN where no test ran
    p_holm: float = math.nan
    decidable: bool = True  # seeds can decide it (claim_decidable); else `not_decidable` says why
    not_decidable: str = ""
    rows: set[str] = field(default_factory=set)  # the labels of the rows its checks read
    looks: tuple[int, ...] = ()  # the planned looks it was judged at (one: a study without `decide`)
    last_look: bool = False  # judged at the design's last planned look: more seeds are not planned
    leans_holds: bool = True  # which verdict its evidence points to (the one a significant p gives)
    waiting: bool = False  # no look yet only because its rows have not finished the first look's seeds
    unusable: list[str] = field(default_factory=list)  # seeds whose value diverged or failed: not judged on them
    outlying: list[str] = field(default_factory=list)  # outlying seeds of its checks ("s3, +5.1 SD"): judged with them
    later: "ClaimResult | None" = None  # decided at an earlier look: the same claim read on every seed since
    alpha: float = ALPHA

    @property
    def tested(self) -> bool:
        """Judged by the paired test (two or more seeds): an untested verdict rests on the means alone."""
        return not math.isnan(self.p)

    @property
    def decided(self) -> bool:
        """Final under the design: it holds or fails by the test, or seeds cannot decide it."""
        return (self.tested and self.verdict in (HOLDS, FAILS)) or not self.decidable

    @property
    def needs_seeds(self) -> bool:
        """More seeds on its rows could decide it: decidable, undecided, not at the design's last look, and
        judged (or waiting for the first look's seeds), not held up by a missing metric or evaluation."""
        return self.decidable and not self.decided and not self.last_look and (self.tested or self.waiting)

    @property
    def words(self) -> str:
        """The verdict as the report, the command line and the MLflow tag say it: "holds", "fails",
        "inconclusive", for a verdict on one seed "holds on 1 seed, untested", and for a claim seeds cannot
        decide "inconclusive (not decidable by seeds)"."""
        if not self.decidable and not self.tested and self.verdict == INCONCLUSIVE:
            return f"{INCONCLUSIVE} ({NOT_DECIDABLE})"
        if self.verdict == INCONCLUSIVE or self.tested:
            return self.verdict
        return f"{self.verdict} on {_seeds(self.seeds)}, untested"

    @property
    def held(self) -> int:
        return sum(check.holds for check in self.checks)

    @property
    def deciding(self) -> CheckResult | None:
        """The check whose evidence decides the claim: for `fails` the most significant the wrong way, else
        the weakest on the claimed side (the one a `holds` waits for)."""
        tested = [(check, check.evidence) for check in self.checks if check.evidence is not None]
        if not tested:
            return None
        if self.verdict == FAILS or not self.leans_holds:
            return min(tested, key=lambda pair: pair[1].p_wrong)[0]
        return max(tested, key=lambda pair: pair[1].p_right)[0]

    def effect(self, sized: bool = False) -> str:
        """The deciding check's effect with its interval and the claimed side, e.g. "ratio 0.963 [0.951,
        0.975], claimed in (0.95, 1)" or "difference -0.58 [-0.68, -0.44], claimed < 0"; "" untested.
        `sized`: how big first, as the report's table says it (`size`): "4.1% lower [3.6, 4.6], claimed
        lower (ratio 0.959 [0.954, 0.964])", "difference -0.58 [-0.68, -0.44] (9.1% lower), claimed < 0"."""
        check = self.deciding
        if check is None:
            return ""
        ev = check.evidence
        assert ev is not None, "the deciding check is a tested one"
        same = [(c.relation, c.evidence) for c in self.checks
                if c.quantity == check.quantity and c.evidence is not None]
        upper = [other.bound for relation, other in same if relation == "<"]
        lower = [other.bound for relation, other in same if relation == ">"]
        if lower and upper:
            claimed = f"claimed in ({_num(max(lower))}, {_num(min(upper))})"
        else:
            claimed = f"claimed {check.relation} {_num(ev.bound)}"
        stated = f"{ev.words} {_num(ev.effect)} [{_num(ev.low)}, {_num(ev.high)}]"
        if sized and ev.kind == RATIO:
            return f"{self.size()} ({stated}{'' if ', claimed ' in self.size() else ', ' + claimed})"
        if sized and ev.kind == DIFFERENCE:
            return f"{ev.words} {self.size()}, {claimed}"
        return f"{stated}, {claimed}"

    def size(self) -> str:
        """How big the deciding check's effect is, for a reader to weigh: a ratio relative to 1, in %, with
        its interval ("4.1% lower [3.6, 4.6]": A is 4.1% below B, the interval 3.6-4.6% below); a difference
        as it is, with its size relative to B's mean ("-0.58 [-0.68, -0.44] (9.1% lower)"); a value with its
        interval ("0.55 [0.52, 0.58]"). "" untested."""
        check = self.deciding
        if check is None:
            return ""
        ev = check.evidence
        assert ev is not None, "the deciding check is a tested one"
        if ev.kind == RATIO:
            bounds = {(c.relation, c.evidence.bound) for c in self.checks
                      if c.quantity == check.quantity and c.evidence is not None}
            claimed = _claimed(*bounds.pop()) if len(bounds) == 1 else ""
            return _relative(ev.effect, ev.low, ev.high) + (f", claimed {claimed}" if claimed else "")
        text = f"{_num(ev.effect)} [{_num(ev.low)}, {_num(ev.high)}]"
        if ev.kind == VALUE or not (math.isfinite(check.reference) and check.reference > 0):
            return text
        share = abs(ev.effect) / check.reference * 100
        return f"{text} ({_percent(share, share)}% {'lower' if ev.effect <= 0 else 'higher'})"


def _percent(value: float, size: float) -> str:
    """A percentage with two significant digits of `size` (the point estimate's), at least one decimal."""
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    decimals = 1 if size == 0 or abs(size) >= 1 else min(4, 1 - math.floor(math.log10(abs(size))))
    return f"{value:.{decimals}f}"


def _claimed(relation: str, bound: float) -> str:
    """A ratio check's claimed side in relative words: "< 0.99" is "over 1.0% lower", "> 1" is "higher"."""
    if bound == 1:
        return "lower" if relation == "<" else "higher"
    share = abs(bound - 1) * 100
    side = "lower" if bound < 1 else "higher"
    over = (relation == "<") == (bound < 1)  # beyond the bound, away from 1: "over"; else "less than"
    return f"{'over' if over else 'less than'} {_percent(share, share)}% {side}"


def _relative(effect: float, low: float, high: float) -> str:
    """A ratio and its interval as a relative effect in %: "4.1% lower [3.6, 4.6]" (ratio 0.959 [0.954,
    0.964]); "2.0% higher [-0.5, 4.6]" where the interval reaches the other side."""
    if effect <= 1:
        point, ends, word = (1 - effect) * 100, ((1 - high) * 100, (1 - low) * 100), "lower"
    else:
        point, ends, word = (effect - 1) * 100, ((low - 1) * 100, (high - 1) * 100), "higher"
    return (f"{_percent(point, point)}% {word} [{_percent(ends[0], point)}, {_percent(ends[1], point)}]")


def _num(value: float) -> str:
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    return f"{value:.4g}"


def _seeds(n: int) -> str:
    return f"{n} seed" + ("" if n == 1 else "s")


def study_design(study: Study, decide: Decide | None = None) -> Decide | None:
    """The sequential design the study's claims are judged by: `decide` (run --decide's), else its own."""
    return decide if decide is not None else study.decide


def claim_decidable(study: Study, claim: Any, decide: Decide | None = None) -> str | None:
    """Why adding seeds cannot decide this claim (None: it can), known before anything runs. `decide`: the
    design (default: the study's `decide:` section, else its defaults, as `run --decide` applies them).

    A `bound` or `length_ratio` on one row is decidable: its per-seed values are tested against the bound
    (a one-sample t-test), as a comparison's per-seed differences are tested against 0."""
    design = decide or study.decide or Decide()
    if study.search.sampled:
        return (f"search.algorithm {study.search.algorithm!r}: its rows are samples the searcher drew, not "
                "configurations repeated by seed")
    if study.scheduler.type != "none":
        return (f"scheduler {study.scheduler.type!r} stops trials early by comparing them with each other: a "
                "row's seeds are not repeats of one training")
    try:
        checks = claim_checks(study, claim)
    except ValueError as error:
        return f"the claim does not fit the study: {error}"
    if not checks:
        return "it compares nothing"
    if claim.min_seeds > design.max_seeds:
        return f"its min_seeds ({claim.min_seeds}) is above decide.max_seeds ({design.max_seeds})"
    return None


def claim_rows(checks: list[Check]) -> set[str]:
    return {term.label for check in checks for term in (check.left, check.right) if term is not None}


def _finished(trials: pd.DataFrame, label: str) -> pd.DataFrame:
    return trials[(trials["label"] == label) & (trials["status"] == "FINISHED")]


def _seed_values(trials: pd.DataFrame, term: Term, prefix: str = "") -> pd.Series:
    """The term's value per seed; `prefix`: read `<prefix><column>` instead (the isolated timings)."""
    rows = _finished(trials, term.label)
    column, over = prefix + term.column, (prefix + term.over) if term.over is not None else None
    if column not in rows or (over is not None and over not in rows):
        return pd.Series(dtype=float)
    values = rows[column].astype(float)
    if over is not None:
        values = values / rows[over].astype(float)
    series = pd.Series(values.to_numpy(), index=rows["seed"].to_numpy())
    # A row that logged no value at all did not log the metric; a NaN beside logged values is a failed
    # evaluation of that trial, kept so that the claim names it (diverged.py), like an infinite value.
    return series.dropna() if series.isna().all() else series


def _unusable(checks: list[Check], sides: list, seeds: list) -> list[str]:
    """The values among `seeds` no test can use (diverged.py), named: "DAPE-Kerple · s1 ppl_64 diverged (+inf)"."""
    named: dict[tuple, str] = {}
    for check, (left, right) in zip(checks, sides):
        for term, values in ((check.left, left), (check.right, right)):
            if term is None or values is None:
                continue
            for seed in seeds:
                value = float(values.get(seed, 0.0))
                if unusable(value):
                    what = term.column + (f"/{term.over}" if term.over else "")
                    named.setdefault((term.label, seed, what), f"{term.label} · s{seed} {what} {describe(value)}")
    return list(named.values())


def is_timing(column: str) -> bool:
    """A per-step or per-forward time in milliseconds (ms_per_step, ms_forward_<L>)."""
    return column.startswith(names.TIMING_PREFIX)


def _timing_prefix(trials: pd.DataFrame, check: Check) -> str:
    """ISOLATED_PREFIX where every finished trial on both sides of a timing check has its isolated timing (taken
    one trial at a time by `orchestrator evaluate --time`), as the report's time table prefers it; else "":
    both sides from the timings taken during training (never one side of each)."""
    terms = [term for term in (check.left, check.right) if term is not None]
    if not all(is_timing(term.column) for term in terms):
        return ""
    for term in terms:
        rows = _finished(trials, term.label)
        for column in (term.column, term.over):
            isolated = ISOLATED_PREFIX + (column or "")
            if column is not None and (isolated not in rows or rows[isolated].isna().any()):
                return ""
    return ISOLATED_PREFIX


def _unfinished(trials: pd.DataFrame, labels: set[str]) -> list[str]:
    lines = []
    for _, trial in trials[trials["label"].isin(labels) & (trials["status"] != "FINISHED")].iterrows():
        error = trial.get("error")
        lines.append(f"{trial['label']} · s{trial['seed']} {trial['status']}"
                     + (f" ({str(error)[:80]})" if isinstance(error, str) and error else ""))
    return lines


def _sides(trials: pd.DataFrame, check: Check, prefix: str = "") -> tuple[pd.Series, pd.Series | None]:
    """The check's two sides per seed: its left term, and its right term as measured (None: a constant)."""
    left = _seed_values(trials, check.left, prefix)
    return left, (_seed_values(trials, check.right, prefix) if check.right is not None else None)


def _describe(check: Check, left: float, right: float, prefix: str = "") -> str:
    """The check with its measured means; a ratio bound also gives the measured ratio, and a timing says
    whether it is the isolated one."""
    relation = {"<": "<", ">": ">"}[check.relation]
    timing = " (isolated timing)" if prefix else ""
    if check.right is None:
        return f"{check.left.describe()}{timing} = {left:.4g} {relation} {check.shift:g}"
    raw = (right - check.shift) / check.scale
    scaled = f"{check.scale:g} × " if check.scale != 1 else ""
    shifted = f" {'+' if check.shift > 0 else '-'} {abs(check.shift):g}" if check.shift else ""
    bound = f" (= {right:.4g})" if scaled or shifted else ""
    measured = f"; measured ratio {left / raw:.3g}" if check.scale != 1 and not check.shift and raw else ""
    return (f"{check.left.describe()}{timing} = {left:.4g} {relation} {scaled}{check.right.describe()} = "
            f"{raw:.4g}{shifted}{bound}{measured}")


def _not_evaluated(study: Study, checks: list[Check], trials: pd.DataFrame) -> list[str]:
    """The columns of `report.lengths` (evaluated after training) that a finished trial of the checks lacks."""
    later = {row.label: later_columns(row) for _, row in study_rows(study)}
    missing: list[str] = []
    for term in {term for check in checks for term in (check.left, check.right) if term is not None}:
        rows = _finished(trials, term.label)
        for column in (term.column, term.over):
            if column is None or column not in later.get(term.label, ()):
                continue
            if column not in rows or rows[column].isna().any():
                missing.append(column)
    return sorted(set(missing), key=lambda column: (int(column.rsplit("_", 1)[1]), column))


def _prefix(order: list, available: set) -> int:
    """How many of `order`'s seeds, from the first, are all available."""
    count = 0
    for seed in order:
        if seed not in available:
            break
        count += 1
    return count


def evaluate_claim(study: Study, claim: Any, trials: pd.DataFrame, study_path: Any = None,
                   decide: Decide | None = None, priors: dict[int, Prior] | None = None) -> ClaimResult:
    """One claim judged on the trials (before Holm: `evaluate_claims` gives the verdict). `study_path`: the
    study file, as the reason of a claim awaiting `orchestrator evaluate` names it; `decide`: the sequential
    design (default: the study's `decide:` section; none: one look at the seeds there are); `priors`: the
    study's shared variance by look (`_judge`)."""
    design = study_design(study, decide)
    result = ClaimResult(claim, alpha=design.alpha if design else ALPHA)
    reason = claim_decidable(study, claim, design)
    if reason is not None:
        result.decidable, result.not_decidable = False, reason
    try:
        checks = claim_checks(study, claim)
    except ValueError as error:
        result.reason = f"the claim does not fit the study: {error}"
        return result
    labels = claim_rows(checks)
    result.rows = labels
    prefixes = [_timing_prefix(trials, check) for check in checks]
    sides = [_sides(trials, check, prefix) for check, prefix in zip(checks, prefixes)]
    available = set.intersection(*(set(left.index) & (set(right.index) if right is not None else set(left.index))
                                   for left, right in sides)) if sides else set()
    if design is not None and result.decidable:
        order = design.seed_order(list(study.seeds))
        finished = _prefix(order, available)
        looks = [n for n in design.looks() if claim.min_seeds <= n <= finished]
        next_look = next((n for n in design.looks() if n > (looks[-1] if looks else 0)), None)
        watched = set(order[:next_look or design.max_seeds])
        unfinished = _unfinished(trials[trials["seed"].isin(watched)], labels)
        common = order[:looks[-1]] if looks else []
        plan: Design | None = Design(tuple(n for n in design.looks() if n >= claim.min_seeds), design.alpha)
    else:
        unfinished = _unfinished(trials, labels)
        common = sorted(available)
        looks = [len(common)] if len(common) >= max(MIN_TEST_SEEDS, claim.min_seeds) else []
        plan = Design((len(common),), result.alpha) if looks else None
    if unfinished and (design is None or not result.decidable or not looks):
        result.reason = "trials not finished: " + "; ".join(unfinished)
        result.waiting = design is not None and result.decidable  # the first look's trials: pending or failed
        return result
    pending = _not_evaluated(study, checks, trials)
    if pending:  # a length of report.lengths: judged once `orchestrator evaluate` has scored it
        lengths = sorted({int(column.rsplit("_", 1)[1]) for column in pending})
        result.reason = (f"not evaluated at {', '.join(map(str, lengths))} yet: orchestrator evaluate "
                         f"{study_path or 'STUDY'}")
        return result
    if not available:
        result.reason = "no finished trial logged the metric"
        return result
    if design is not None and result.decidable:
        if not looks:
            result.seeds, result.waiting = _prefix(order, available), True
            result.reason = (f"waiting for seeds: {result.seeds} of the first {order[:next_look]} finished on "
                             f"its rows; the first look is at {next_look}")
            return result
    elif len(common) < claim.min_seeds:
        result.seeds = len(common)
        result.reason = f"{len(common)} seed(s) finished; the claim needs min_seeds = {claim.min_seeds}"
        return result
    result.seeds = len(common)
    bad = _unusable(checks, sides, common)
    if bad:  # no arithmetic on them: undecidable until the seed is rerun (docs/deciding.md)
        result.unusable = bad
        result.reason = (f"undecidable until rerun: {'; '.join(bad)}. A diverged or failed evaluation is not a "
                         "number a test can use; rerun that trial (or delete its run) and the claim is judged "
                         "again")
        return result
    result.looks = tuple(looks)
    result.last_look = design is None or not result.decidable or (bool(looks) and looks[-1] == design.max_seeds)
    ratios = {(check.left, check.right) for check in checks if check.right is not None and check.scale != 1.0}
    for check, prefix, (left, right) in zip(checks, prefixes, sides):
        kind = RATIO if (check.left, check.right) in ratios else None
        a = left[common].to_numpy(dtype=float)
        b = right[common].to_numpy(dtype=float) if right is not None else None
        mean_right = check.scale * float(b.mean()) + check.shift if b is not None else check.shift
        holds = float(a.mean()) < mean_right if check.relation == "<" else float(a.mean()) > mean_right
        ev = (evidence(plan, a, b, check.relation, check.scale, check.shift, kind, priors)
              if plan is not None else None)
        caveat = check_caveat(trials, [term for term in (check.left, check.right) if term is not None])
        result.checks.append(CheckResult(_describe(check, float(a.mean()), mean_right, prefix) + caveat, holds,
                                         ev.p_right if ev else math.nan, ev, check.relation,
                                         (check.left, check.right), float(b.mean()) if b is not None else math.nan))
    tested = [check.evidence for check in result.checks if check.evidence is not None]
    for ev in tested:
        for position, distance in ev.outlying:
            named = f"s{common[position]}, {distance:+.1f} SD"
            if named not in result.outlying:
                result.outlying.append(named)
    if tested and len(tested) == len(result.checks):
        result.p, result.leans_holds = claim_p(tested)
    if unfinished:
        result.reason = "trials not finished (judged without them): " + "; ".join(unfinished)
    return result


def _verdict(result: ClaimResult) -> None:
    if not result.checks:
        return  # inconclusive, with its reason already
    waiting = result.reason
    if not result.tested:  # one seed: the means alone, and the words say so
        result.verdict = HOLDS if result.held == len(result.checks) else FAILS
        if result.verdict == FAILS:
            first = next(check for check in result.checks if not check.holds)
            result.reason = (f"{len(result.checks) - result.held} of {len(result.checks)} checks do not hold on the "
                             f"means of {_seeds(result.seeds)} (no paired test with fewer than {MIN_TEST_SEEDS} "
                             f"seeds); the first that does not: ✗ {first.text}")
        else:
            result.reason = (f"on the means of {_seeds(result.seeds)} only: no paired test with fewer than "
                             f"{MIN_TEST_SEEDS} seeds, so the difference may be seed noise")
        return
    at = f"{_seeds(result.seeds)}" + (f", looks {list(result.looks)}" if len(result.looks) > 1 else "")
    if result.p_holm <= result.alpha:
        result.verdict = HOLDS if result.leans_holds else FAILS
        result.reason = f"paired test by seed over {at}, Holm-corrected {format_p(result.p_holm)}"
    else:
        result.verdict = INCONCLUSIVE
        lean = "holds" if result.leans_holds else "fails"
        ties = [check for check in result.checks if check.evidence is not None and check.evidence.tie]
        if ties:
            result.reason = (f"undecided by the test: {ties[0].text.split(' (')[0]}: the paired differences are the "
                             f"same on every seed ({at}; up to rounding), so a t-test has no spread to judge them "
                             f"by (its p would be 0, which the data cannot show); on the means alone the claim "
                             f"{lean}")
        else:
            result.reason = (f"not significant: the evidence so far leans to \"{lean}\" but does not decide it "
                             f"(Holm-corrected {format_p(result.p_holm)} > {result.alpha:g} over {at})")
    if result.outlying:  # judged with it, as measured; the reader weighs it (docs/deciding.md)
        many = len(result.outlying) > 1
        result.reason += (f"; {'outlying seeds' if many else 'an outlying seed'} ({'; '.join(result.outlying)} "
                          f"from the other seeds' mean, in their SDs) {'weigh' if many else 'weighs'} on it: judged "
                          f"with {'them' if many else 'it'}")
    if waiting:
        result.reason += f"; {waiting}"
    if not result.decidable:
        result.reason += f"; {NOT_DECIDABLE}: {result.not_decidable}"


def evaluate_claims(study: Study, trials: pd.DataFrame, study_path: Any = None,
                    decide: Decide | None = None) -> list[ClaimResult]:
    """Every claim of the study, judged on its in-study trials (any status), Holm-corrected together. With
    a sequential design (`decide`, or the study's own), Holm runs over every claim seeds can decide, those
    without a test yet counting as p = 1, and each claim's verdict is the one reached at its stopping look
    (`_locked`); without one, Holm runs over the claims that have a test."""
    design = study_design(study, decide)
    if design is not None:
        return _locked(study, design, trials, study_path, decide)
    results = _judge(study, trials, study_path, decide)
    _correct(results, sequential=False)
    return results


def _judge(study: Study, trials: pd.DataFrame, study_path: Any, decide: Decide | None,
           locked: dict[int, ClaimResult] | None = None) -> list[ClaimResult]:
    """Every claim judged on `trials` (a `locked` one, by its index, kept as it is). With the design's
    `shared_variance`, twice: first alone, to read every tested check's sample variance at each look, then
    with the prior fitted on all of them at that look (decision.shared_priors: a moderated t-test). The
    locked claims' checks count in the fit as well: the seed's noise is the same whichever claim reads it."""
    locked = locked or {}
    design = study_design(study, decide)
    if design is None or not design.shared_variance:
        return [locked.get(i) or evaluate_claim(study, claim, trials, study_path, decide)
                for i, claim in enumerate(study.expect)]
    alone = [evaluate_claim(study, claim, trials, study_path, decide) for claim in study.expect]
    priors = shared_priors([check.evidence for result in alone if result.decidable for check in result.checks
                            if check.evidence is not None])
    return [locked.get(i) or evaluate_claim(study, claim, trials, study_path, decide, priors)
            for i, claim in enumerate(study.expect)]


def _correct(results: list[ClaimResult], sequential: bool, locked: dict[int, ClaimResult] | None = None) -> None:
    """Holm across the claims, then each claim's verdict; a `locked` claim (by its index) keeps its verdict
    and enters Holm with the p it was decided at."""
    locked = locked or {}
    pvalues = [locked[i].p if i in locked else (1.0 if math.isnan(r.p) else r.p) if sequential and r.decidable
               else r.p for i, r in enumerate(results)]
    for i, (result, adjusted) in enumerate(zip(results, holm(pvalues))):
        if i in locked:
            continue
        result.p_holm = adjusted if result.tested else math.nan
        _verdict(result)


def _locked(study: Study, design: Decide, trials: pd.DataFrame, study_path: Any,
            decide: Decide | None) -> list[ClaimResult]:
    """The claims replayed look by look, as `run --decide` takes the looks: at each planned look n, every
    claim not yet decided is judged on the first n seeds of the design's order; a claim decided there keeps
    that verdict (its p enters later looks' Holm unchanged). Seeds its rows trained later (for other, undecided
    claims) are judged beside it (`ClaimResult.later`) and cannot reopen it: the loop and the report give one
    verdict per claim, the one at its stopping look (docs/deciding.md)."""
    order = design.seed_order(list(study.seeds))
    locked: dict[int, ClaimResult] = {}
    top = int(trials["seed"].max()) if len(trials) else -1
    for n in design.looks():
        frame = trials[trials["seed"].isin(order[:n])]
        results = _judge(study, frame, study_path, decide, locked)
        _correct(results, sequential=True, locked=locked)
        for i, result in enumerate(results):
            if i not in locked and result.decidable and result.tested and result.verdict in (HOLDS, FAILS):
                locked[i] = result
        if all(seed > top for seed in order[n:]):  # no later seed in the store: later looks judge the same
            break
    final = _judge(study, trials, study_path, decide)
    _correct(final, sequential=True, locked=locked)
    for i, result in locked.items():
        later = final[i]
        if later.tested and later.seeds > result.seeds:
            result.later = later
            extra = later.seeds - result.seeds
            result.reason += (f"; decided at its stopping look ({_seeds(result.seeds)}): the {extra} later seeds "
                              f"its rows trained for other claims read {later.effect() or 'no effect'} "
                              f"(shown, not judged: they cannot reopen the verdict)")
        final[i] = result
    return final
# The groups a study's verdicts are counted in: (verdict, tested); untested groups hold verdicts on fewer seeds.
GROUPS = ((HOLDS, True), (HOLDS, False), (FAILS, True), (FAILS, False), (INCONCLUSIVE, True))


def _group(result: ClaimResult) -> tuple[str, bool]:
    return result.verdict, result.verdict == INCONCLUSIVE or result.tested


def summary(results: list[ClaimResult]) -> dict[tuple[str, bool], int]:
    """How many claims fall in each of GROUPS."""
    return {group: sum(_group(r) == group for r in results) for group in GROUPS}


def rows_needing_seeds(results: list[ClaimResult]) -> set[str]:
    """The rows `run --decide` adds seeds to: those the claims that more seeds could decide read."""
    return {row for result in results if result.needs_seeds for row in result.rows}


def decision_summary(results: list[ClaimResult], trials: int | None = None) -> str:
    """How many claims are decided, how, and at what cost, for the command line: e.g. "6 of 8 claims decided
    (5 hold, 1 fails) on 24 trials; 2 undecided"; verdicts on one seed are counted apart: "7 on 1 seed,
    untested (7 hold, 0 fail on the means)"."""
    decided = [r for r in results if r.decidable and r.decided]
    holds, fails = (sum(r.verdict == verdict for r in decided) for verdict in (HOLDS, FAILS))
    text = (f"{len(decided)} of {len(results)} claim{'s' if len(results) != 1 else ''} decided "
            f"({holds} hold{'s' if holds == 1 else ''}, {fails} fail{'s' if fails == 1 else ''})")
    if trials is not None:
        text += f" on {trials} trial{'s' if trials != 1 else ''}"
    untested = sum(not r.tested and r.verdict != INCONCLUSIVE for r in results)
    on_means = [sum(not r.tested and r.verdict == verdict for r in results) for verdict in (HOLDS, FAILS)]
    rerun = sum(bool(r.unusable) for r in results)
    undecided = sum(r.decidable and not r.decided for r in results) - untested - rerun
    seeds = sum(r.needs_seeds for r in results)
    rest = [f"{undecided} undecided" + (f" ({seeds} could use more seeds)" if seeds else "") if undecided else "",
            f"{rerun} undecidable until a diverged or failed seed is rerun" if rerun else "",
            f"{untested} on 1 seed, untested ({on_means[0]} hold{'s' if on_means[0] == 1 else ''}, {on_means[1]} "
            f"fail{'s' if on_means[1] == 1 else ''} on the means)" if untested else "",
            f"{len(results) - sum(r.decidable for r in results)} {NOT_DECIDABLE}"
            if not all(r.decidable for r in results) else ""]
    return "; ".join([text, *[part for part in rest if part]])


def mlflow_record(results: list[ClaimResult]) -> tuple[dict[str, str], dict[str, float]]:
    """Tags (claim.<id> = its words: "holds", "holds on 1 seed, untested", ...; claim.<id>.effect = its effect
    with interval in words) and metrics for the parent run: claims_holding and claims_failing (tested),
    claims_holding_untested and claims_failing_untested (one seed), claims_inconclusive, claims_decided; per
    tested claim claim.<id>.p_holm, .seeds, and .effect, .effect_low, .effect_high where finite."""
    tags = {f"claim.{r.claim.id}": r.words for r in results}
    tags.update({f"claim.{r.claim.id}.effect": r.effect() for r in results if r.effect()})
    counts = summary(results)
    metrics: dict[str, float] = {"claims_holding": counts[HOLDS, True], "claims_holding_untested": counts[HOLDS, False],
               "claims_failing": counts[FAILS, True], "claims_failing_untested": counts[FAILS, False],
               "claims_inconclusive": counts[INCONCLUSIVE, True],
               "claims_decided": sum(r.decided and r.decidable for r in results)}
    for r in results:
        if not r.tested:
            continue
        prefix = f"claim.{r.claim.id}"
        metrics[f"{prefix}.p_holm"] = r.p_holm
        metrics[f"{prefix}.seeds"] = r.seeds
        check = r.deciding
        if check is not None:
            assert check.evidence is not None, "the deciding check is a tested one"
            for name, value in (("effect", check.evidence.effect), ("effect_low", check.evidence.low),
                                ("effect_high", check.evidence.high)):
                if math.isfinite(value):
                    metrics[f"{prefix}.{name}"] = float(value)
    return tags, metrics

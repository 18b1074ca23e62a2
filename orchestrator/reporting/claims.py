"""Verdicts on a study's claims (its `expect:` section) from the trials in the store.

A claim is a set of checks (orchestrator/study/claim_checks.py), each "left < right" (or ">") per seed. Its verdict:
- inconclusive: a trial it needs did not finish (the reason names it), a length of `report.lengths` is not
  evaluated yet ("not evaluated at 2048 yet: orchestrator evaluate STUDY"), a metric is missing, fewer seeds
  finished than its `min_seeds`, or every check holds on the means but the paired test disagrees;
- fails: some check does not hold on the means over the seeds;
- holds: every check holds on the means and, with 3 or more seeds, the paired test by seed agrees.

A verdict on fewer than 3 seeds is *untested*: no test could say whether the difference is more than seed noise,
so it is shown and counted apart, in other words ("holds on 1 seed, untested": `ClaimResult.words`), never
as the bare "holds" of a claim that passed the paired test; the MLflow tag claim.<id> carries the same words.

The test is reporting/stats.py's paired t-test of the checks' two sides by seed, made one-sided in the claimed
direction; a claim's p-value is the largest of its checks' (it holds only if all do: an intersection-union
test), and the p-values of the study's claims are Holm-corrected together. With fewer than 3 seeds no test
is run and a claim is judged on its means (its `min_seeds` says whether that is enough).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ..study import Study
from ..study.claim_checks import Check, Term, claim_checks, later_columns, study_rows
from ..trial.protocol import ISOLATED_PREFIX
from .families import is_timing
from .protocol_note import check_caveat
from .stats import ALPHA, MIN_SEEDS, compare, format_p, holm

HOLDS, FAILS, INCONCLUSIVE = "holds", "fails", "inconclusive"


@dataclass
class CheckResult:
    text: str  # the measured values and the relation, e.g. "DAPE: ppl_512 = 5.999 < Kerple: ppl_512 = 6.746"
    holds: bool
    p: float = math.nan  # one-sided, in the claimed direction; NaN where no test ran


@dataclass
class ClaimResult:
    claim: Any  # the study's claim model
    verdict: str = INCONCLUSIVE
    reason: str = ""
    seeds: int = 0
    checks: list[CheckResult] = field(default_factory=list)
    p: float = math.nan
    p_holm: float = math.nan

    @property
    def tested(self) -> bool:
        """Judged on enough seeds for the paired test (MIN_SEEDS): an untested verdict rests on the means alone."""
        return self.seeds >= MIN_SEEDS

    @property
    def words(self) -> str:
        """The verdict as the report, the command line and the MLflow tag say it: "holds", "fails",
        "inconclusive", or for a verdict on fewer than MIN_SEEDS seeds "holds on 1 seed, untested"."""
        if self.verdict == INCONCLUSIVE or self.tested:
            return self.verdict
        return f"{self.verdict} on {_seeds(self.seeds)}, untested"

    @property
    def held(self) -> int:
        return sum(check.holds for check in self.checks)

    def measured(self) -> str:
        return f"{self.held}/{len(self.checks)} checks hold" if self.checks else "–"


def _seeds(n: int) -> str:
    return f"{n} seed" + ("" if n == 1 else "s")


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
    return pd.Series(values.to_numpy(), index=rows["seed"].to_numpy()).dropna()


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


def _sides(trials: pd.DataFrame, check: Check, prefix: str = "") -> tuple[pd.Series, pd.Series]:
    left = _seed_values(trials, check.left, prefix)
    if check.right is None:
        return left, pd.Series(check.shift, index=left.index, dtype=float)
    return left, _seed_values(trials, check.right, prefix) * check.scale + check.shift


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


def _one_sided(left: pd.Series, right: pd.Series, relation: str, holds: bool) -> float:
    comparison = compare(left, right)
    if comparison.test == "no variance":  # the same difference at every seed: no doubt about its sign
        return 0.0 if holds else 1.0
    if not comparison.tested:
        return math.nan
    return comparison.p / 2 if holds else 1 - comparison.p / 2


def _not_evaluated(study: Study, checks: list[Check], trials: pd.DataFrame) -> list[str]:
    """The columns of `report.lengths` (evaluated after training) that a finished trial of the checks lacks."""
    later = {row.label: later_columns(row) for _, row in study_rows(study)}
    missing = []
    for term in {term for check in checks for term in (check.left, check.right) if term is not None}:
        rows = _finished(trials, term.label)
        for column in (term.column, term.over):
            if column in later.get(term.label, ()) and (column not in rows or rows[column].isna().any()):
                missing.append(column)
    return sorted(set(missing), key=lambda column: (int(column.rsplit("_", 1)[1]), column))


def evaluate_claim(study: Study, claim: Any, trials: pd.DataFrame, study_path: Any = None) -> ClaimResult:
    """`study_path`: the study file, as the reason of a claim awaiting `orchestrator evaluate` names it."""
    result = ClaimResult(claim)
    try:
        checks = claim_checks(study, claim)
    except ValueError as error:
        result.reason = f"the claim does not fit the study: {error}"
        return result
    labels = {term.label for check in checks for term in (check.left, check.right) if term is not None}
    unfinished = _unfinished(trials, labels)
    if unfinished:
        result.reason = "trials not finished: " + "; ".join(unfinished)
        return result
    pending = _not_evaluated(study, checks, trials)
    if pending:  # a length of report.lengths: judged once `orchestrator evaluate` has scored it
        lengths = sorted({int(column.rsplit("_", 1)[1]) for column in pending})
        result.reason = (f"not evaluated at {', '.join(map(str, lengths))} yet: orchestrator evaluate "
                         f"{study_path or 'STUDY'}")
        return result
    prefixes = [_timing_prefix(trials, check) for check in checks]
    sides = [_sides(trials, check, prefix) for check, prefix in zip(checks, prefixes)]
    seeds = set.intersection(*(set(left.index) & set(right.index) for left, right in sides)) if sides else set()
    result.seeds = len(seeds)
    if not seeds:
        result.reason = "no finished trial logged the metric"
        return result
    if len(seeds) < claim.min_seeds:
        result.reason = f"{len(seeds)} seed(s) finished; the claim needs min_seeds = {claim.min_seeds}"
        return result
    common = sorted(seeds)
    for check, prefix, (left, right) in zip(checks, prefixes, sides):
        left, right = left[common], right[common]
        a, b = float(left.mean()), float(right.mean())
        holds = a < b if check.relation == "<" else a > b
        p = _one_sided(left, right, check.relation, holds) if len(common) >= MIN_SEEDS else math.nan
        caveat = check_caveat(trials, [term for term in (check.left, check.right) if term is not None])
        result.checks.append(CheckResult(_describe(check, a, b, prefix) + caveat, holds, p))
    tested = [check.p for check in result.checks]
    result.p = max(tested) if tested and not any(math.isnan(p) for p in tested) else math.nan
    return result


def _verdict(result: ClaimResult) -> None:
    if not result.checks:
        return  # inconclusive, with its reason already
    if result.held < len(result.checks):
        result.verdict = FAILS
        result.reason = f"{len(result.checks) - result.held} of {len(result.checks)} checks do not hold on the means"
        if not result.tested:
            result.reason += f" of {_seeds(result.seeds)} (no paired test with fewer than {MIN_SEEDS} seeds)"
        first = next(check for check in result.checks if not check.holds)
        result.reason += f"; the first that does not: ✗ {first.text}"
    elif math.isnan(result.p_holm):
        result.verdict = HOLDS
        result.reason = (f"on the means of {_seeds(result.seeds)} only: no paired test with fewer than {MIN_SEEDS} "
                         "seeds, so the difference may be seed noise" if not result.tested else "")
    elif result.p_holm < ALPHA:
        result.verdict = HOLDS
        result.reason = f"paired test by seed over {result.seeds} seeds, Holm-corrected {format_p(result.p_holm)}"
    else:
        result.verdict = INCONCLUSIVE
        result.reason = (f"holds on the means but not significantly: Holm-corrected {format_p(result.p_holm)} "
                         f"over {result.seeds} seeds")


def evaluate_claims(study: Study, trials: pd.DataFrame, study_path: Any = None) -> list[ClaimResult]:
    """Every claim of the study, judged on its in-study trials (any status), Holm-corrected together."""
    results = [evaluate_claim(study, claim, trials, study_path) for claim in study.expect]
    for result, adjusted in zip(results, holm([result.p for result in results])):
        result.p_holm = adjusted
        _verdict(result)
    return results


# The groups a study's verdicts are counted in: (verdict, tested); untested groups hold verdicts on fewer seeds.
GROUPS = ((HOLDS, True), (HOLDS, False), (FAILS, True), (FAILS, False), (INCONCLUSIVE, True))


def _group(result: ClaimResult) -> tuple[str, bool]:
    return result.verdict, result.verdict == INCONCLUSIVE or result.tested


def summary(results: list[ClaimResult]) -> dict[tuple[str, bool], int]:
    """How many claims fall in each of GROUPS."""
    return {group: sum(_group(r) == group for r in results) for group in GROUPS}


def headline(results: list[ClaimResult]) -> str:
    """The verdicts counted, untested ones apart: "1 holds, 1 fails, 0 inconclusive" when every claim had
    the paired test; else e.g. "0 holds (paired test), 5 hold on 1 seed (untested), 0 fails, 2 fail on 1
    seed (untested), 0 inconclusive"."""
    counts = summary(results)
    untested = any(n for (_, tested), n in counts.items() if not tested)
    parts = []
    for (verdict, tested), n in counts.items():
        if tested:
            suffix = {HOLDS: " (paired test)", FAILS: f" (on {MIN_SEEDS}+ seeds)"}.get(verdict, "") if untested else ""
            parts.append(f"{n} {verdict}{suffix}")
        elif n:
            seeds = sorted({r.seeds for r in results if _group(r) == (verdict, tested)})
            on = _seeds(seeds[0]) if len(seeds) == 1 else f"fewer than {MIN_SEEDS} seeds"
            parts.append(f"{n} {verdict if n == 1 else verdict.removesuffix('s')} on {on} (untested)")
    return ", ".join(parts)


def mlflow_record(results: list[ClaimResult]) -> tuple[dict[str, str], dict[str, float]]:
    """Tags (claim.<id> = its words: "holds", "holds on 1 seed, untested", ...) and metrics for the parent
    run: claims_holding and claims_failing (on enough seeds for the paired test), claims_holding_untested and
    claims_failing_untested (fewer), claims_inconclusive, and claim.<id>.p_holm where a test ran."""
    tags = {f"claim.{r.claim.id}": r.words for r in results}
    counts = summary(results)
    metrics = {"claims_holding": counts[HOLDS, True], "claims_holding_untested": counts[HOLDS, False],
               "claims_failing": counts[FAILS, True], "claims_failing_untested": counts[FAILS, False],
               "claims_inconclusive": counts[INCONCLUSIVE, True]}
    metrics.update({f"claim.{r.claim.id}.p_holm": r.p_holm for r in results if not math.isnan(r.p_holm)})
    return tags, metrics

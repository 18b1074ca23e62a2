"""The decision rule as `run --decide`'s loop reads it (orchestrator/decide_loop.py): each claim judged at a look
(claims.py), reduced to what the loop needs to choose the rows that train more seeds."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..study import Study


@dataclass
class Judged:
    """One claim as the decision rule judged it at a look: what the loop needs of a ClaimResult."""

    id: str
    verdict: str
    decided: bool
    decidable: bool
    needs_seeds: bool  # more seeds on its rows could decide it (not, e.g., a length still to be evaluated)
    rows: list[str]  # the row labels its checks read
    seeds: int
    reason: str = ""
    effect: str = ""  # the effect with its interval and the claimed side, as the report says it
    p: float | None = None
    p_holm: float | None = None


def claim_rows(study: Study, claim: Any) -> list[str]:
    """The row labels a claim's checks read (both sides)."""
    from ..study.claim_checks import claim_checks

    labels = {term.label for check in claim_checks(study, claim) for term in (check.left, check.right) if term}
    return sorted(labels)


def not_decidable(study: Study, claim: Any) -> str | None:
    """Why seeds cannot decide this claim, or None: the decision rule's `claim_decidable`."""
    from .claims import claim_decidable

    return claim_decidable(study, claim)


def judge(study: Study, frame: Any, study_path: Any = None) -> list[Judged]:
    """Every claim of the study judged on `frame` (the look's trials) by the report's decision rule."""
    from .claims import evaluate_claims

    judged = []
    for result in evaluate_claims(study, frame, study_path):
        effect = result.effect() if callable(getattr(result, "effect", None)) else ""
        judged.append(Judged(result.claim.id, result.words, result.decided, result.decidable, result.needs_seeds,
                             sorted(result.rows), int(result.seeds), result.reason or result.not_decidable,
                             effect, _plain(result.p), _plain(result.p_holm)))
    return judged


def _plain(value: Any) -> Any:
    """JSON-able: NaN as None, tuples as lists."""
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "item"):  # numpy scalars
        return _plain(value.item())
    return value

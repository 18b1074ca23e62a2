"""The checks of a study's `decide:` section that need its rows: refused before anything runs, each with its
field path. The section's own fields (max_seeds below min_seeds, ...) are checked by its model (model.py); a
GPU-hour budget needs the plan's estimate of a trial and is checked where the sequence starts
(orchestrator/decide_loop.py); which claims seeds can decide is the decision rule's to say (the loop reports
the others as "not decidable by seeds" before it trains anything).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .identity import trial_identity
from .trial_checks import resolved_rows

if TYPE_CHECKING:
    from .model import Decide, Study


def trials_per_seed(study: "Study") -> int:
    """How many distinct trials one seed of every row trains (rows that share a trial train it once)."""
    return len({trial_identity(row.config.to_dict()) for row in resolved_rows(study)})


def minimum_trials(study: "Study", decide: "Decide") -> int:
    """The trials of the first look: every row at min_seeds."""
    return trials_per_seed(study) * decide.min_seeds


def decide_problems(study: "Study", decide: "Decide | None" = None) -> list[str]:
    """The problems of adding seeds to this study until its claims are decided: its `decide` section, or
    `decide` (the defaults `run --decide` applies to a study without one)."""
    decide = decide or study.decide
    if decide is None:
        return []
    if not study.expect:
        return ["decide: the study has no claims (expect:) to decide; add claims or leave decide out"]
    if study.search.sampled:
        return [f"decide: a {study.search.algorithm} search samples its rows, so there is no fixed row to add seeds "
                "to; decide a grid study's claims"]
    try:
        minimum = minimum_trials(study, decide)
    except ValueError:
        return []  # the rows' own problems are reported by the trial validation
    if decide.budget_trials is not None and decide.budget_trials < minimum:
        return [f"decide.budget_trials: {decide.budget_trials} trial(s) cannot buy the minimum: "
                f"{trials_per_seed(study)} row(s) x min_seeds {decide.min_seeds} = {minimum} trials"]
    return []

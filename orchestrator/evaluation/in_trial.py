"""Which of a study's `report.lengths` each trial to run scores itself, right after its own evaluation, so that the
evaluation after training (`orchestrator/run.py` `evaluate_later`) overlaps the other trials' training instead of
following all of it: the lengths `plan_tasks` would give the trial once finished (its own protocol, the lengths
of report.lengths at or beyond its training length that its `eval.lengths` lack), where their evaluation fits the
device's memory (`check_memory`'s estimate; those that do not stay `evaluate_later`'s, which refuses them with its
note). The trial scores them exactly as `orchestrator evaluate` scores its kept model (dape_core
`run_experiment(later_lengths=...)`, tested bit-identical), outside its config and identity; what it could not
score, `evaluate_later` finds missing and scores as before. Sampled searches (no identity before Tune samples
a trial) and CHE trials are left to `evaluate_later`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..run_context import RunContext
from ..trial.trials import distinct

if TYPE_CHECKING:
    from ..study import Study


def later_lengths_by_trial(context: RunContext) -> dict[str, list[int]]:
    """trial id -> the report.lengths that trial scores itself (trials with none are absent)."""
    return later_lengths_for(context.study, context.rows)


def later_lengths_for(study: "Study", trials: list) -> dict[str, list[int]]:
    """`later_lengths_by_trial` for these trials of the study: the plan's later lengths of each (planning/
    plan_view.py: those of report.lengths beyond its own), where their evaluation fits the memory budget."""
    from dape_core import ExperimentConfig

    from ..planning.estimate import evaluation_memory_bytes
    from ..planning.plan_view import later_lengths
    from .runner import memory_budget

    budget = None
    out: dict[str, list[int]] = {}
    for trial in distinct(trials):
        later = later_lengths(trial.config, study)
        if not later:
            continue
        if budget is None:
            budget, _ = memory_budget(study)
        cfg = ExperimentConfig(**trial.config)
        if all(evaluation_memory_bytes(cfg.model, cfg.eval.batch_size, length) <= budget for length in later):
            out[trial.trial_id] = later
    return out

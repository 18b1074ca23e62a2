"""Checks of what a searcher, ASHA and the report read from the trials, against what the trials log.

A searcher or a scheduler waiting for a metric that never arrives does nothing without a word (Ray Tune's
ASHA skips results without its metric; a misspelt `search.metric` leaves Optuna blind), and a grace period
longer than the trials means the scheduler never acts. Each is an error listing what the trials do log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import dape_core.metric_names as names

from .metric_families import BY_NAME, METRIC_FAMILIES
from .trial_metrics import listing, logged_metrics, periodic_metrics

if TYPE_CHECKING:
    from .model import Study
    from .trial_checks import ResolvedTrial


def search_problems(study: "Study", trials: list["ResolvedTrial"]) -> list[str]:
    if not trials:
        return []
    configs = [trial.config for trial in trials]
    logged = set.intersection(*(logged_metrics(cfg) for cfg in configs))
    periodic = set.intersection(*(periodic_metrics(cfg) for cfg in configs))
    problems = []
    sampling = study.search.sampled
    asha = study.scheduler.type == "asha"
    own_metric = study.scheduler.metric is not None
    for metric in study.search.metrics if sampling else []:
        if metric not in logged:
            users = "the searcher" + ("" if own_metric or not asha else " and ASHA")
            problems.append(_never_logged("search.metric", metric, users, logged))
    if asha and study.search.multi_objective:
        return problems + [
            f"scheduler.type: asha stops trials by one metric and one direction, but search.metric names "
            f"{len(study.search.metrics)} ({', '.join(study.search.metrics)}): a multi-objective search keeps every "
            "sample to its end (Optuna's multi-objective sampler takes no intermediate results); use scheduler.type: "
            "none, or search one metric"] + _report_problems(study, logged)
    if asha:
        metric = study.scheduler.metric or study.search.primary_metric  # ASHA: a single-metric search
        field = "scheduler.metric" if own_metric else "search.metric (ASHA's metric)"
        if metric not in logged:
            if own_metric or not sampling:
                problems.append(_never_logged(field, metric, "ASHA", logged))
        elif metric not in periodic:
            problems.append(f"{field}: {metric!r} is logged only when a trial ends, so ASHA, which compares "
                            f"trials while they train, would never stop one; use one reported during training: "
                            f"{listing(periodic)}{_val_loss_hint(periodic)}")
        problems += _grace_problems(study, trials)
    return problems + _report_problems(study, logged)


def _never_logged(field: str, metric: str, users: str, logged: set[str]) -> str:
    return (f"{field}: the trials never log {metric!r}, so {users} would wait on it for nothing; they log: "
            f"{listing(logged)}{_val_loss_hint(logged) if metric == names.VAL_LOSS else ''}")


def _val_loss_hint(logged: set[str]) -> str:
    return "" if names.VAL_LOSS in logged else f" ({names.VAL_LOSS} needs train.eval_every)"


def _grace_problems(study: "Study", trials: list["ResolvedTrial"]) -> list[str]:
    shortest = min(trials, key=lambda trial: trial.config.train.steps)
    steps = shortest.config.train.steps
    if study.scheduler.grace_period <= steps:
        return []
    return [f"scheduler.grace_period: {study.scheduler.grace_period} steps is beyond train.steps={steps} of "
            f"{shortest.where}, so ASHA could never stop that trial; give a grace period of at most {steps}"]


def _report_problems(study: "Study", logged: set[str]) -> list[str]:
    """A report.metric the file names (not the default) must have columns in these trials."""
    family = study.report.metric
    if "metric" not in study.report.model_fields_set or any(BY_NAME[family].matches(name) for name in logged):
        return []
    families = [known.name for known in METRIC_FAMILIES if any(known.matches(m) for m in logged)]
    return [f"report.metric: {family!r} has no column in these trials (they log {listing(logged)}); "
            f"pick one of {', '.join(families)}"]

"""The order trials go to Ray Tune: longest first, by their estimated duration (the plan's estimate).

Tune starts trials in the order it is given them as slots free up. Started in file order, a study whose
longest trial comes last ends with that trial running alone while the other slots idle (kernel_size: its
1x7 trial, the slowest, is its last row). Longest-first (the LPT rule) starts the long trials while the
short ones can still fill the other slots around them, which bounds the idle tail by the shortest trials.

The duration is the one `orchestrator plan` shows (plan_view.trial_duration): the measured ms per step of the
store's finished runs of the same shape where there are some, else the analytic estimate (estimate.py). The
measured one matters on CPU, where the analytic FLOP count misjudges the processors' cost (in one loaded run
here a DAPE-Kerple step took 2.3x a Kerple step; by FLOPs it is 1.1x), so it can misorder a study's rows.
"""

from __future__ import annotations

from ..study import Study
from ..trial.trials import Trial
from .learned import MeasuredSteps
from .plan_view import trial_duration


def estimated_seconds(trial: Trial, study: Study, measured: MeasuredSteps | None = None) -> float:
    return trial_duration(trial.config, study, measured)[1]


def longest_first(trials: list[Trial], study: Study, measured: MeasuredSteps | None = None) -> list[Trial]:
    """The trials by estimated duration, longest first; ties keep the study's order (a stable sort)."""
    seconds = {id(trial): estimated_seconds(trial, study, measured) for trial in trials}
    return sorted(trials, key=lambda trial: -seconds[id(trial)])

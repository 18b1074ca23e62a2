"""The order trials go to Ray Tune: longest first, by their estimated cost (estimate.py).

Tune starts trials in the order it is given them as slots free up. Started in file order, a study whose
longest trial comes last ends with that trial running alone while the other slots idle (kernel_size: its
1x7 trial, the slowest, is its last row). Longest-first (the LPT rule) starts the long trials while the
short ones can still fill the other slots around them, which bounds the idle tail by the shortest trials.
"""

from __future__ import annotations

from dape_core import ExperimentConfig

from ..study import Resources
from .estimate import estimate
from .trials import Trial


def estimated_seconds(trial: Trial, resources: Resources) -> float:
    return estimate(ExperimentConfig(**trial.config), resources.gpus, resources.cpus).seconds


def longest_first(trials: list[Trial], resources: Resources) -> list[Trial]:
    """The trials by estimated duration, longest first; ties keep the study's order (a stable sort)."""
    return sorted(trials, key=lambda trial: -estimated_seconds(trial, resources))

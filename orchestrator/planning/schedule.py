"""The order trials go to Ray Tune: longest first, by their estimated duration (the plan's estimate).

Tune starts trials in the order it is given them as slots free up. Started in file order, a study whose
longest trial comes last ends with that trial running alone while the other slots idle (kernel_size: its
1x7 trial, the slowest, is its last row). Longest-first (the LPT rule) starts the long trials while the
short ones can still fill the other slots around them, which bounds the idle tail by the shortest trials.

The duration is the training time `orchestrator plan` shows (plan_view.trial_duration): the measured ms per step
of the store's finished runs of the same shape where there are some, else the analytic estimate (estimate.py).
The measured one matters on CPU, where the analytic FLOP count misjudges the processors' cost (in one loaded run
here a DAPE-Kerple step took 2.3x a Kerple step; by FLOPs it is 1.1x), so it can misorder a study's rows.
To it is added the trial's evaluation: its own lengths and the report.lengths it scores itself (orchestrator/
run.py), by their forward FLOPs at the rate its training time implies (measured or not), so that the trials whose
long evaluation makes them longest start first: kernel_size's 1x7 scores 1024 tokens per window at the end.

Where the number of slots is known (the private local Ray: this machine's CPUs) and the trials are few (at most
`EXHAUSTIVE_UP_TO`), `packed` improves on LPT: it simulates Tune's list scheduling (the slot that frees first
takes the next trial) for every order and keeps the one whose estimated makespan is shortest, LPT's where none is
shorter. kernel_size on 2 slots: LPT pairs 1x7 with 1x5 and leaves the shortest, Kerple, alone at the end;
1x7 then 1x3 on one slot, 1x5, DAPE and Kerple on the other ends sooner.
"""

from __future__ import annotations

import itertools

from dape_core import ExperimentConfig

from ..study import Study
from ..trial.trials import Trial
from .estimate import evaluation_flops
from .learned import MeasuredSteps
from .plan_view import trial_duration


def estimated_seconds(trial: Trial, study: Study, measured: MeasuredSteps | None = None,
                      later: list[int] | tuple[int, ...] = ()) -> float:
    """Training (measured, else analytic) and evaluation (its own lengths and `later`, the report.lengths the trial
    scores itself): the evaluation's forward FLOPs at the rate of the trial's training FLOPs per second."""
    cost, seconds, _ = trial_duration(trial.config, study, measured)
    training_flops = cost.flops_per_step * _steps(trial.config)
    if not training_flops:
        return seconds
    return seconds * (1 + evaluation_flops(ExperimentConfig(**trial.config), later) / training_flops)


def _steps(config: dict) -> int:
    cfg = ExperimentConfig(**config)
    return cfg.che.steps if cfg.che is not None else cfg.train.steps


def longest_first(trials: list[Trial], study: Study, measured: MeasuredSteps | None = None,
                  later_lengths: dict[str, list[int]] | None = None) -> list[Trial]:
    """The trials by estimated duration (training and evaluation), longest first; ties keep the study's order (a
    stable sort). `later_lengths`: trial id -> the report.lengths it scores itself."""
    later_lengths = later_lengths or {}
    seconds = {id(trial): estimated_seconds(trial, study, measured, later_lengths.get(trial.trial_id, ()))
               for trial in trials}
    return sorted(trials, key=lambda trial: -seconds[id(trial)])


EXHAUSTIVE_UP_TO = 7  # 7! = 5040 orders, simulated in milliseconds


def makespan(seconds: list[float], slots: int) -> float:
    """When the last of trials of these durations ends, started in this order on `slots` slots, each started by
    the slot that frees first (Tune's order: the next pending trial takes a freed slot)."""
    free = [0.0] * slots
    for duration in seconds:
        slot = min(range(slots), key=free.__getitem__)
        free[slot] += duration
    return max(free)


def packed(trials: list[Trial], study: Study, measured: MeasuredSteps | None = None,
           later_lengths: dict[str, list[int]] | None = None, slots: int = 0) -> list[Trial]:
    """The order with the shortest estimated makespan on `slots` slots (0: unknown, then LPT): LPT's unless
    another order of at most EXHAUSTIVE_UP_TO trials ends sooner (ties keep LPT's)."""
    ordered = longest_first(trials, study, measured, later_lengths)
    if slots < 2 or len(ordered) <= slots or len(ordered) > EXHAUSTIVE_UP_TO:
        return ordered
    later_lengths = later_lengths or {}
    seconds = [estimated_seconds(trial, study, measured, later_lengths.get(trial.trial_id, ())) for trial in ordered]
    best, shortest = tuple(range(len(ordered))), makespan(seconds, slots)
    for order in itertools.permutations(range(len(ordered))):
        span = makespan([seconds[index] for index in order], slots)
        if span < shortest * (1 - 1e-9):
            best, shortest = order, span
    return [ordered[index] for index in best]

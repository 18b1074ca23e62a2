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

from ..study import Study
from ..trial.trials import Trial
from .learned import MeasuredSteps
from .plan_view import evaluation_seconds, trial_duration


def estimated_seconds(trial: Trial, study: Study, measured: MeasuredSteps | None = None,
                      later: list[int] | tuple[int, ...] = ()) -> float:
    """Training (measured, else analytic) and evaluation (its own lengths and `later`, the report.lengths the trial
    scores itself: plan_view.evaluation_seconds), as `orchestrator plan` shows them."""
    cost, seconds, _ = trial_duration(trial.config, study, measured)
    return seconds + evaluation_seconds(trial.config, cost, seconds, later)


def longest_first(trials: list[Trial], study: Study, measured: MeasuredSteps | None = None,
                  later_lengths: dict[str, list[int]] | None = None) -> list[Trial]:
    """The trials by estimated duration (training and evaluation), longest first; ties keep the study's order (a
    stable sort). `later_lengths`: trial id -> the report.lengths it scores itself."""
    return packed(trials, study, measured, later_lengths, slots=0)


def local_slots(resources, workers: int = 1) -> int:
    """How many trials of `workers` workers the private local Ray runs at once: this machine's CPUs over each
    trial's (`resources.cpus` per worker), at most resources.max_concurrent; 0 where it is not known before Ray
    starts (a cluster at RAY_ADDRESS, GPUs)."""
    import os

    if os.environ.get("RAY_ADDRESS") or resources.gpus or not resources.cpus:
        return 0
    slots = int((os.cpu_count() or 1) // (resources.cpus * workers))
    return min(slots, resources.max_concurrent) if resources.max_concurrent else slots


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
    later_lengths = later_lengths or {}
    seconds = [estimated_seconds(trial, study, measured, later_lengths.get(trial.trial_id, ())) for trial in trials]
    return [trials[index] for index in best_order(seconds, slots)]


def best_order(seconds: list[float], slots: int) -> list[int]:
    """`packed` on durations: the indices in the order to start them. Longest first (a stable sort); on a known
    number of slots (2 or more, fewer trials than EXHAUSTIVE_UP_TO and more than the slots) the first order found
    whose simulated makespan is shorter than that, if any."""
    ordered = sorted(range(len(seconds)), key=lambda index: -seconds[index])
    if slots < 2 or len(ordered) <= slots or len(ordered) > EXHAUSTIVE_UP_TO:
        return ordered
    best, shortest = ordered, makespan([seconds[index] for index in ordered], slots)
    for order in itertools.permutations(ordered):
        span = makespan([seconds[index] for index in order], slots)
        if span < shortest * (1 - 1e-9):
            best, shortest = list(order), span
    return best

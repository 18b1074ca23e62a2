"""What cannot finish is refused before launch: `validate`, `plan` and `run` share this check.

A trial is infeasible, a validation error with the numbers (exit 2, nothing launched, nothing written to the
store), where the plan's estimates (planning/estimate.py) say that
- training it needs more than MEMORY_MARGIN times the memory a worker has: `resources.gpu_memory_gb` for GPU
  trials (no check where it is not given), this machine's memory for CPU trials run here (a study sent to a
  cluster with `--address` is not judged by the driver's memory). The estimate is an upper bound (float32
  activations, every score map kept for the backward pass: no fused attention, no activation checkpointing),
  so a trial estimated between 1x and MEMORY_MARGIN x is left to `plan`'s "fits: NO" column and its advice:
  the shipped paper profiles of d_dape, search, training_length and time_cost are estimated at 1.1-1.9x
  resources.gpu_memory_gb=80, and are not refused;
- evaluating its longest length (its `eval.lengths` and the study's `report.lengths`) needs more than that
  (the evaluation estimate, `orchestrator evaluate`'s own check, which refuses beyond 1x);
- training it takes longer than `resources.max_hours` (default 720: a month; the estimate is an order of
  magnitude, the plan's analytic one, so the bound is for the absurd, not a schedule).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from .estimate import estimate, evaluation_memory_bytes

MEMORY_MARGIN = 2.0  # a training estimate beyond this many times the worker's memory cannot fit

if TYPE_CHECKING:
    from ..study.model import Study
    from ..study.trial_checks import ResolvedTrial


def check(local_memory: float | None) -> "Callable[[Study, list[ResolvedTrial]], list[str]]":
    """The check `load_study(feasibility=...)` runs once the study is otherwise valid (the study package sits
    below planning, so the commands hand it this)."""
    return functools.partial(feasibility_problems, local_memory=local_memory)


def machine_memory() -> float:
    """This machine's physical memory, bytes."""
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def feasibility_problems(study: "Study", trials: list["ResolvedTrial"], local_memory: float | None) -> list[str]:
    """One problem per infeasible trial and cause, named by the trial's place in the study. `local_memory`:
    the memory of the machine CPU trials run on (None: not known here, e.g. a cluster's workers)."""
    resources = study.resources
    if resources.gpus:
        budget = resources.gpu_memory_gb * 2**30 * min(1.0, resources.gpus) if resources.gpu_memory_gb else None
        where = f"resources.gpu_memory_gb={resources.gpu_memory_gb:g}" if resources.gpu_memory_gb else ""
    else:
        budget = local_memory
        where = f"this machine's memory ({local_memory / 2**30:.1f} GiB)" if local_memory else ""
    problems: list[str] = []
    seen: set[str] = set()
    for trial in trials:
        cfg = trial.config
        key = repr(cfg)
        if key in seen:
            continue
        seen.add(key)
        train = cfg.train
        cost = estimate(cfg, resources.gpus, resources.cpus)
        if budget is not None and cost.peak_memory_bytes > MEMORY_MARGIN * budget:
            problems.append(
                f"{trial.where}: training needs about {cost.peak_memory_bytes / 2**30:,.1f} GiB per worker "
                f"(train.batch_size={train.batch_size}, train.seq_len={train.seq_len}; the plan's estimate: "
                f"weights, gradients, AdamW's moments and one micro-batch's activations), more than "
                f"{MEMORY_MARGIN:g}x {where}: lower train.batch_size or train.seq_len, or raise train.grad_accum")
        if budget is not None and cfg.che is None:
            longest = max([*cfg.eval.lengths, *study.report.later_lengths(train.seq_len, list(cfg.eval.lengths))])
            need = evaluation_memory_bytes(cfg.model, cfg.eval.batch_size, longest)
            if need > budget:
                problems.append(
                    f"{trial.where}: evaluating L={longest} needs about {need / 2**30:,.1f} GiB (eval.batch_size="
                    f"{cfg.eval.batch_size}; weights, one layer's activations and score maps of a batch), more "
                    f"than {where}: give shorter eval.lengths (or report.lengths) or a smaller eval.batch_size")
        hours = cost.seconds / 3600
        if hours > resources.max_hours:
            problems.append(
                f"{trial.where}: training takes about {hours:,.0f} h (train.steps={train.steps:,}, "
                f"{cost.flops_per_step:.3g} FLOP per step at the plan's assumed throughput), more than "
                f"resources.max_hours={resources.max_hours:g}: lower train.steps, or raise resources.max_hours "
                "if it is meant")
    return problems

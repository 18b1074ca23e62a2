"""`orchestrator run --local`: the trials one by one in this process, without Ray, for stepping through a
trial with a debugger. It feeds the same trial events as Ray Tune's callback."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from ..study import Study
from ..tracking.events import TrialEvents
from ..trial.protocol import CODE_FILES_KEY
from ..trial.trials import Trial
from .trainable import execute


def multi_worker_problem(trials: list[Trial]) -> str | None:
    """--local runs each trial in this one process: a trial of several workers cannot run there."""
    wide = sorted({f"{trial.label} ({trial.workers} workers)" for trial in trials if trial.workers > 1})
    if not wide:
        return None
    return (f"--local runs every trial in this process, on one worker; {', '.join(wide)} need several. Run "
            "without --local (Ray Train starts their workers), or set resources.workers / distributed.workers to 1")


def run_local(trials: list[Trial], events: TrialEvents, study: Study, storage_dir: Path,
              later_lengths: dict[str, list[int]] | None = None, code_files: dict[str, str] | None = None) -> None:
    """`later_lengths`: trial id -> the lengths it scores after its own (trainable.py `later_lengths`);
    `code_files`: the code fingerprint's files, which each trial checks on disk (trainable.py CodeGuard)."""
    problem = multi_worker_problem(trials)
    if problem:
        raise ValueError(problem)
    threads = max(1, int(study.resources.cpus))
    for trial in trials:
        events.started(trial)
        try:
            tune_config = {"trial": trial.payload(), "checkpoint_root": str(storage_dir.resolve() / "checkpoints"),
                           "launch_dir": str(Path.cwd()), "keep_weights": study.keep_weights,
                           "later_lengths": later_lengths or {}, CODE_FILES_KEY: json.dumps(code_files or {})}
            execute(tune_config, functools.partial(events.result, trial), threads)
        except Exception as error:  # a failing trial is recorded; the study goes on
            events.errored(trial, f"{type(error).__name__}: {error}")
            continue
        events.ended(trial)

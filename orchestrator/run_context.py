"""What one command runs with, gathered once by its caller (commands/, or a test) and carried down the run path
(execution/runner.py, decide_loop.py, evaluation/runner.py, reporting/build.py): the validated study and its trials
(expanded once), the store (opened once per command: every step below reads and writes through it), where Ray is
and where the trials keep their state, the time limits, and the console progress that shows it. Frozen: nothing
below the caller changes what the command was asked to do (a look of `run --decide` is a copy with its own rows).

`RunContext.create` is `orchestrator run`'s (the store created: the writer's door); `RunContext.open` that of a
command that reads a study already run (`evaluate`); `RunContext.of` a store the caller has already opened."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .study import Study
from .tracking.code_check import StalePolicy
from .tracking.console import ConsoleProgress
from .tracking.store import TRIAL_ID_TAG, StudyStore
from .trial.trials import Trial, expand, expand_stored

# How long Ray is waited for, and a node able to host a trial (execution/cluster.py reads these).
DEFAULT_CONNECT_TIMEOUT_S = 30.0
DEFAULT_RESOURCE_WAIT_S = 600.0


@dataclass(frozen=True)
class RunContext:
    study: Study
    rows: list[Trial]  # the study expanded once: every row and seed (rows that share a trial included)
    store: StudyStore  # opened once per command (created by `run`: checked before anything runs)
    storage_dir: Path = Path(".orchestrator")  # Ray Tune's state, Ray Train's runs and the trials' checkpoints
    address: str | None = None  # the Ray cluster; None: a private local Ray
    local: bool = False  # the trials (or evaluations) in this process, one by one, without Ray
    failed_only: bool = False  # only the trials whose latest run FAILED
    stale: StalePolicy = StalePolicy.REFUSE  # finished trials of other code: refused, retrained or kept
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S
    resource_wait: float = DEFAULT_RESOURCE_WAIT_S
    study_path: Path | None = None  # the study file (mlflow.source tags; the report's parts that read it again)
    progress: ConsoleProgress | None = None  # None: a console progress for the trials to run
    started: float = field(default_factory=time.monotonic)  # when the command started (its wall time)

    @classmethod
    def create(cls, study: Study, tracking_uri: str, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
               rows: list[Trial] | None = None, **options: Any) -> RunContext:
        """The context of a run of `study`: its store created (StudyStore.create: an unusable store stops the run
        here), its `rows` expanded unless the caller has them already; `options`: the other fields."""
        started = time.monotonic()
        store = StudyStore.create(tracking_uri, study.name, connect_timeout)
        return cls(study=study, rows=expand(study) if rows is None else rows, store=store,
                   connect_timeout=connect_timeout, started=started, **options)

    @classmethod
    def open(cls, study: Study, tracking_uri: str, chosen: str = "", **options: Any) -> RunContext:
        """The context of a command on a study already run: its store opened for reading (StudyStore.open: never
        created; StudyNotFound where the study has not run there), its rows as the store holds them (`of`)."""
        started = time.monotonic()
        return cls.of(study, StudyStore.open(tracking_uri, study.name, chosen), started=started, **options)

    @classmethod
    def of(cls, study: Study, store: StudyStore, rows: list[Trial] | None = None, **options: Any) -> RunContext:
        """The context over a store the caller has opened: `rows` unless given, the study expanded as the store
        holds it (with the seeds `run --decide` added: trials.py `expand_stored`)."""
        if rows is None:
            rows = expand_stored(study, {run.data.tags.get(TRIAL_ID_TAG) for run in store.trial_runs()})
        return cls(study=study, rows=rows, store=store, **options)

    @property
    def tracking_uri(self) -> str:
        return self.store.tracking_uri

"""What one `orchestrator run` runs with, gathered once by its caller (cli.py, or a test) and handed down:
the validated study and its trials (expanded once), the store it records into, where Ray is and where the
trials keep their state, the time limits, and the console progress that shows it. Frozen: nothing below the
caller changes what the run was asked to do."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from ..study import Study
from ..tracking.console import ConsoleProgress
from ..tracking.store import StudyStore
from ..trial.code_check import StalePolicy
from ..trial.trials import Trial, expand
from .cluster import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_RESOURCE_WAIT_S


@dataclass(frozen=True)
class RunContext:
    study: Study
    rows: list[Trial]  # the study expanded once: every row and seed (rows that share a trial included)
    store: StudyStore  # created (the writer): checked before anything runs
    storage_dir: Path = Path(".orchestrator")  # Ray Tune's state, Ray Train's runs and the trials' checkpoints
    address: str | None = None  # the Ray cluster; None: a private local Ray
    local: bool = False  # the trials in this process, one by one, without Ray
    failed_only: bool = False  # only the trials whose latest run FAILED
    stale: StalePolicy = StalePolicy.REFUSE  # finished trials of other code: refused, retrained or kept
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S
    resource_wait: float = DEFAULT_RESOURCE_WAIT_S
    study_path: Path | None = None  # the study file (mlflow.source tags; the report's parts that read it again)
    progress: ConsoleProgress | None = None  # None: a console progress for the trials to run
    started: float = field(default_factory=time.monotonic)  # when the command started (its wall time)

    @classmethod
    def create(cls, study: Study, tracking_uri: str, connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
               rows: list[Trial] | None = None, **options) -> "RunContext":
        """The context of a run of `study`: its store created (StudyStore.create: an unusable store stops the run
        here), its `rows` expanded unless the caller has them already; `options`: the other fields."""
        started = time.monotonic()
        store = StudyStore.create(tracking_uri, study.name, connect_timeout)
        return cls(study=study, rows=expand(study) if rows is None else rows, store=store,
                   connect_timeout=connect_timeout, started=started, **options)

    @property
    def tracking_uri(self) -> str:
        return self.store.tracking_uri


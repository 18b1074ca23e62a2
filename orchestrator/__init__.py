"""orchestrator: study file -> validated study -> trials -> Ray Tune -> dape_core -> MLflow -> report.

Bottom to top (each imports only its own floor and those below; tests/test_layers.py):

    study/      the study format, its validation and a trial's identity (config hash)
    trial/      what a trial is (the study's trials) and what a trial reports: the types every floor shares
    tracking/   the tracking store, the trial events and their listeners (MLflow recorder, console), the UI
    planning/   what `orchestrator plan` shows: cost estimates, measured steps, the order trials start in
    execution/  run_study: Ray Tune (or --local), the worker-side trainable
    reporting/  results frame and report from the tracking store
    evaluation/, slurm/, doctor/   `orchestrator evaluate`, `slurm`, `doctor`
    run.py      `orchestrator run`: execution, then the report
    commands/   each command's work, over one invocation (the study located, loaded, its store and folders)
    cli.py      the `orchestrator` command: its arguments and help, each command handed to commands/

The names below are imported on first use, so that `orchestrator --help` does not load torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dape_core.lazy import lazy_attributes

_PUBLIC = {"Study": "study", "StudyError": "study", "load_study": "study", "parse_study": "study",
           "Trial": "trial.trials", "expand": "trial.trials", "load_results": "reporting",
           "run_study": "execution.runner"}

__all__ = list(_PUBLIC)

if TYPE_CHECKING:
    from .execution.runner import run_study
    from .reporting import load_results
    from .study import Study, StudyError, load_study, parse_study
    from .trial.trials import Trial, expand

__getattr__, __dir__ = lazy_attributes(__name__, _PUBLIC)

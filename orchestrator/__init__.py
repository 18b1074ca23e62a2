"""orchestrator: study file -> validated study -> trials -> Ray Tune -> dape_core -> MLflow -> report.

    study/      the study format and its validation
    planning/   trials (identity = config hash) and cost estimates
    execution/  run_study: Ray Tune (or --local), the worker-side trainable
    tracking/   the tracking store, the trial events and their listeners (MLflow recorder, console), the UI
    reporting/  results frame and report from the tracking store
    cli.py      the `orchestrator` command

The names below are imported on first use, so that `orchestrator --help` does not load torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_PUBLIC = {"Study": "study", "StudyError": "study", "load_study": "study", "parse_study": "study",
           "Trial": "planning", "expand": "planning", "load_results": "reporting", "run_study": "execution.runner"}

__all__ = list(_PUBLIC)

if TYPE_CHECKING:
    from .execution.runner import run_study
    from .planning import Trial, expand
    from .reporting import load_results
    from .study import Study, StudyError, load_study, parse_study


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
    globals()[name] = value
    return value

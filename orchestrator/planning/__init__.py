"""From a validated study to the trials it runs: trial expansion with each trial's identity (trials.py) and
analytic cost estimates for `orchestrator plan` (estimate.py)."""

from .trials import Trial, expand, materialize

__all__ = ["Trial", "expand", "materialize"]

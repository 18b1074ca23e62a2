"""From a validated study to the trials it runs: trial expansion with each trial's identity (trials.py) and
analytic cost estimates for `orchestrator plan` (estimate.py)."""

from .trials import StoredIdentities, Trial, distinct, expand, materialize, shared_rows

__all__ = ["StoredIdentities", "Trial", "distinct", "expand", "materialize", "shared_rows"]

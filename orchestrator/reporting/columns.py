"""The vocabulary of a study's results frame (results.py): which columns say who a trial is, which hold its
config and swept values, and which are metrics (everything else, so that a new metric needs no code here)."""

from __future__ import annotations

import pandas as pd

from ..tracking.store import ENV_TAG_PREFIX, SWEPT_TAG_PREFIX
from ..trial.protocol import SERIES

MISSING = "MISSING"  # the status of a trial the study defines but the store has no run for
# Metrics logged as a series over something other than training steps: their "latest" value means nothing.
SERIES_METRICS = tuple(SERIES)
IDENTITY_COLUMNS = ["label", "variant", "seed", "status", "baseline", "row_index", "block", "compare_with", "in_study",
                    "trial_id", "run_id", "run_name", "error", "device", "precision", "attention_kernels", "data_hash",
                    "code_version", "code_fingerprint", "computed_by", "start_time", "stopped_early", "template_id",
                    "shared_with",
                    "eval_protocol", "evaluated_later"]  # protocol_note.py's
CONFIG_PREFIX = "config."


def metric_columns(frame: pd.DataFrame) -> list[str]:
    """Columns that hold metrics: everything that is not identity, config, swept values or environment."""
    return [c for c in frame.columns
            if c not in IDENTITY_COLUMNS and not c.startswith((CONFIG_PREFIX, SWEPT_TAG_PREFIX, ENV_TAG_PREFIX))]

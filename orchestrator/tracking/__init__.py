"""The study's tracking store, written by one process (the driver) and read by the rest.

- uri.py: where the store is (flag, MLFLOW_TRACKING_URI, ./mlruns), whether it exists yet;
- store.py: StudyStore: `create` (the writer) and `open` (read-only), the run tags;
- client.py: the MLflow client that explains an unreachable tracking server in one paragraph;
- events.py: the one stream of trial events (started, result, finished, failed, retried) and its tally;
- recorder.py: the listener that writes the events to MLflow (the only MLflow writer);
- console.py: the listener that shows them on the console;
- ui.py: `orchestrator ui`, MLflow's UI on the study.
"""

from .events import TrialEvents, TrialListener
from .store import (ROLE_TAG, STOPPED_EARLY_TAG, SWEPT_TAG_PREFIX, TRIAL_ID_TAG, StudyNotFound, StudyStore,
                    flatten)
from .uri import default_tracking_uri, resolve_tracking_uri, ui_command

__all__ = ["ROLE_TAG", "STOPPED_EARLY_TAG", "SWEPT_TAG_PREFIX", "TRIAL_ID_TAG", "StudyNotFound", "StudyStore",
           "TrialEvents", "TrialListener", "default_tracking_uri", "flatten", "resolve_tracking_uri", "ui_command"]

"""The study's tracking store, written by one process (the driver) and read by the rest.

- uri.py: where the store is (flag, MLFLOW_TRACKING_URI, ./mlruns), whether it exists yet;
- store.py: StudyStore: `create` (the writer) and `open` (read-only), the run tags, whose experiment it is;
- sqlite_file.py: a SQLite store's file checked before MLflow opens it, and the lock on its creation;
- relocation.py: a SQLite store moved or copied with its artifacts folder points at the folder beside it;
- client.py: the MLflow client that explains an unreachable tracking server (or a damaged store) in one
  paragraph, and the probe of a tracking server at start;
- leases.py: which orchestrator runs which trial (or evaluates which run at which length), so that two
  commands on one study do each piece of work once;
- events.py: the one stream of trial events (started, result, finished, failed, retried) and its tally;
- recorder.py: the listener that writes the events to MLflow (the only MLflow writer);
- console.py: the listener that shows them on the console;
- ui.py: `orchestrator ui`, MLflow's UI on the study.
"""

from typing import TYPE_CHECKING

from dape_core.lazy import lazy_attributes

# Imported on first use (each name from the module that defines it): a submodule never needs this package's
# names, and `orchestrator.tracking.uri` loads without MLflow.
_PUBLIC = {"TrialEvents": "events", "TrialListener": "events", "ROLE_TAG": "store", "STOPPED_EARLY_TAG": "store",
           "SWEPT_TAG_PREFIX": "store", "TRIAL_ID_TAG": "store", "StudyStore": "store", "StudyNotFound": "lookup",
           "flatten": "params", "default_tracking_uri": "uri", "resolve_tracking_uri": "uri", "ui_command": "uri"}
__all__ = list(_PUBLIC)

if TYPE_CHECKING:
    from .events import TrialEvents, TrialListener
    from .lookup import StudyNotFound
    from .params import flatten
    from .store import ROLE_TAG, STOPPED_EARLY_TAG, SWEPT_TAG_PREFIX, TRIAL_ID_TAG, StudyStore
    from .uri import default_tracking_uri, resolve_tracking_uri, ui_command

__getattr__, __dir__ = lazy_attributes(__name__, _PUBLIC)

"""A finished trial's resume checkpoints are removed by the driver once its result is recorded, not by the trial.

The trial reports its checkpoint files with its final result (protocol.CHECKPOINT_FILES_KEY) and leaves them on
disk: a study stopped between the trial's end and the driver's record of it (Ctrl-C, SIGTERM, a kill, a
preemption) then resumes that trial from its last checkpoint, at its last step, and only evaluates it again
instead of training it from scratch. `CheckpointCleanup` listens after the MLflow recorder (runner.py): it
removes the files when the trial's run is FINISHED in the store (a failed or stopped trial keeps them: a rerun
resumes from them). Anything else in the trial's folder (a checkpoint set aside as unreadable) stays.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from ..tracking.events import TrialFinished, TrialListener, TrialResult
from ..trial.protocol import CHECKPOINT_FILES_KEY

_log = logging.getLogger(__name__)


def remove_checkpoints(paths: list[Path]) -> None:
    """Remove a finished trial's checkpoint files and folders, then their folder where it is left empty."""
    for path in paths:
        try:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        except OSError:  # a disk error here costs only space: the trial is recorded
            _log.debug("could not remove the checkpoint %s of a finished trial", path, exc_info=True)
    for folder in {path.parent for path in paths}:
        try:
            folder.rmdir()
        except OSError:  # not empty (its heat maps, a set-aside checkpoint) or gone
            pass


class CheckpointCleanup(TrialListener):
    """Removes a finished trial's checkpoints once the listeners before it (the recorder) have recorded it."""

    def __init__(self) -> None:
        self.files: dict[str, list[Path]] = {}

    def trial_result(self, event: TrialResult) -> None:
        if event.final and event.result.get(CHECKPOINT_FILES_KEY) and not event.result.get("error"):
            self.files[event.key] = [Path(path) for path in event.result[CHECKPOINT_FILES_KEY]]

    def trial_finished(self, event: TrialFinished) -> None:
        remove_checkpoints(self.files.pop(event.key, []))

"""`orchestrator evaluate --verify`: every kept model file of a study's trials checked against the SHA-256 its
run recorded at save (tracking/checksums.py). Reads only: nothing is scored or written, so a read-only store
(an archive) is verified as well."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from typing import Callable

from ..tracking.checksums import recorded_checksums
from ..tracking.store import StudyStore
from .request import weights_path
from .worker import weights_folder


@dataclass
class Verification:
    ok: list[str] = field(default_factory=list)  # run names whose every file is as saved
    changed: dict[str, str] = field(default_factory=dict)  # run name -> the files that changed or are missing
    unchecked: list[str] = field(default_factory=list)  # runs recorded before checksums were kept


def verify_study(store: StudyStore, say: Callable[[str], None] = print) -> Verification:
    """Check each finished trial run's kept files (every run of the study with a kept model, a trial redone
    after a failure included); one line per run that is not as saved, or has nothing to check against."""
    from dape_core.stored import changed_files

    outcome = Verification()
    runs = [run for run in store.trial_runs() if run.info.status == "FINISHED" and weights_path(run.data.tags)]
    for run in sorted(runs, key=lambda run: run.info.run_name or ""):
        name = f"{run.info.run_name} (run {run.info.run_id})"
        checksums = recorded_checksums(run.data.tags)
        if not checksums:
            outcome.unchecked.append(name)
            say(f"  {name}: not checked: no checksum recorded on its run (saved before checksums were kept)")
            continue
        try:
            folder, temporary = weights_folder(run.info.artifact_uri or "", store.tracking_uri)
        except Exception as error:  # a remote store's artifacts that cannot be downloaded
            outcome.changed[name] = f"its model folder cannot be read ({type(error).__name__}: {error})"
            say(f"  {name}: FAILED: {outcome.changed[name]}")
            continue
        try:
            problems = changed_files(folder, checksums)
        finally:
            if temporary:
                shutil.rmtree(temporary, ignore_errors=True)
        if problems:
            outcome.changed[name] = "; ".join(problems)
            say(f"  {name}: CHANGED: {outcome.changed[name]}")
        else:
            outcome.ok.append(name)
    return outcome

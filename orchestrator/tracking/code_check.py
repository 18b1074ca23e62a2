"""Which finished trials were computed by the current code (study/code_identity.py), which by other code
("stale"), and which by code a store written before the fingerprint did not record ("code unknown").

The grain is the trial's (issue 53): a trial's current code is the core's files and its own components'
(`CodeFingerprint.for_trial`); a run is of the current code when its fingerprint is that one, or when the files
it recorded, read for the trial's files only, are the trial's current ones (a run recorded with the whole
library's fingerprint, before issue 53, stays reusable where its trial's files did not change).

A finished trial is reused only when its run's code fingerprint is the current one; a trial whose run has no
fingerprint (a store from before issue 43) is "code unknown": said, and reused as before (neither stale nor
current). A stale trial is neither reused nor retrained silently: `run` asks which (`StalePolicy`); `status`
and `plan` name them with the files that differ.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable

from ..study.code_identity import CodeFingerprint, changed_within
from ..trial.trials import StoredIdentities, Trial, distinct
from .store import CODE_TAG, STOPPED_EARLY_TAG, TRIAL_ID_TAG

CURRENT, UNKNOWN, STALE = "current", "code unknown", "stale"
NOT_RECORDED = "(its files were not recorded)"


class StalePolicy(str, Enum):
    """What `run` does with stale trials: refuse (the default: exit 2, naming them), retrain or keep them."""

    REFUSE = "refuse"
    RETRAIN = "retrain"
    KEEP = "keep"


@dataclass
class CodeCheck:
    current: CodeFingerprint  # the library's (the trials' own: `current.for_trial(trial.config)`)
    states: dict[str, str] = field(default_factory=dict)  # trial id -> CURRENT | UNKNOWN | STALE (finished ones)
    stale_code: dict[str, str] = field(default_factory=dict)  # stale trial id -> its run's fingerprint's key
    files: dict[str, list[str]] = field(default_factory=dict)  # stale fingerprint's key -> the files that differ
    source: dict[str, Any] = field(default_factory=dict)  # trial id -> the finished run that counts for it

    def state(self, trial: Trial) -> str | None:
        return self.states.get(trial.trial_id)

    def stale(self, trials: list[Trial]) -> list[Trial]:
        return [trial for trial in distinct(trials) if self.state(trial) == STALE]

    def unknown(self, trials: list[Trial]) -> list[Trial]:
        return [trial for trial in distinct(trials) if self.state(trial) == UNKNOWN]

    def differing_files(self, trials: list[Trial]) -> list[str]:
        """The files that differ between the current code and the code of these (stale) trials."""
        seen: dict[str, None] = {}
        for trial in trials:
            for name in self.files.get(self.stale_code.get(trial.trial_id, ""), []):
                seen.setdefault(name, None)
        return list(seen)

    def describe_stale(self, trials: list[Trial], limit: int = 8) -> str:
        """"3 finished trial(s) were computed by other code (files that differ: dape_core/processors.py): A · s0,
        ..."."""
        stale = self.stale(trials)
        names = ", ".join(trial.run_name for trial in stale[:limit]) + (
            f", and {len(stale) - limit} more" if len(stale) > limit else "")
        files = ", ".join(self.differing_files(stale)) or "none named"
        return (f"{len(stale)} finished trial(s) were computed by other code than the current (files of theirs that "
                f"differ: {files}): {names}")

    def describe_unknown(self, trials: list[Trial]) -> str:
        unknown = self.unknown(trials)
        return (f"{len(unknown)} finished trial(s) have code unknown (their runs are from before the code was "
                "recorded): reused, neither stale nor current")


def check_code(trials: list[Trial], runs: list, current: CodeFingerprint,
               read_fingerprint: Callable[[object], CodeFingerprint | None], own: str | None = None) -> CodeCheck:
    """The code state of each of `trials` that has a finished run among `runs` (trained to its end). A trial with
    a finished run of the current code is CURRENT; else one with a run without a fingerprint is UNKNOWN; else
    STALE. `read_fingerprint(run)`: the per-file hashes a run recorded (read once per stale fingerprint). The
    run that counts (`source`): of the decisive runs, one of the experiment `own` (the study's) where there is
    one, else another study's (reused across studies), the latest."""
    stored = StoredIdentities(trials)
    finished: dict[str, list] = {}
    for run in runs:
        if run.info.status == "FINISHED" and run.data.tags.get(STOPPED_EARLY_TAG) != "true":
            finished.setdefault(run.data.tags.get(TRIAL_ID_TAG), []).append(run)
    check = CodeCheck(current)
    recorded: dict[str, CodeFingerprint | None] = {}  # a fingerprint's files, read once

    def differing(run, mine: CodeFingerprint) -> list[str]:
        """The trial's files whose code differs in `run`'s (NOT_RECORDED where it kept none)."""
        digest = run.data.tags.get(CODE_TAG)
        if digest == mine.digest:
            return []
        if digest not in recorded:
            recorded[digest] = read_fingerprint(run)
        old = recorded[digest]
        return changed_within(old, mine) if old is not None else [NOT_RECORDED]

    for trial in distinct(trials):
        found = [run for tag in stored.candidates(trial) for run in finished.get(tag, [])]
        if not found:
            continue
        mine = current.for_trial(trial.config)
        codes = [run.data.tags.get(CODE_TAG) or "" for run in found]
        same = [run for run, code in zip(found, codes) if code and not differing(run, mine)]
        if same:
            check.states[trial.trial_id] = CURRENT
            decisive = same
        elif "" in codes:
            check.states[trial.trial_id] = UNKNOWN
            decisive = [run for run, code in zip(found, codes) if not code]
        else:
            check.states[trial.trial_id] = STALE
            decisive = found
        chosen = max(decisive, key=lambda run: (run.info.experiment_id == own, run.info.start_time or 0))
        check.source[trial.trial_id] = chosen
        if check.states[trial.trial_id] == STALE:
            key = f"{chosen.data.tags[CODE_TAG]}>{mine.digest}"
            check.stale_code[trial.trial_id] = key
            check.files.setdefault(key, differing(chosen, mine))
    return check


def store_code_check(store, trials: list[Trial], current: CodeFingerprint, runs: list | None = None) -> CodeCheck:
    """`check_code` over the store's trial runs (`runs` where the caller read them already) and the finished
    runs of the same identities and the current code by the store's other studies (reused across studies)."""
    from .stored_code import stored_fingerprint

    own = store.trial_runs() if runs is None else runs
    stored = StoredIdentities(trials)
    tags = {tag for trial in distinct(trials) for tag in stored.candidates(trial)}
    # another study's runs count only of the current code: its stale or unknown ones are not this study's concern
    return check_code(trials, own + store.shared_runs(tags, current_codes(current, trials)), current,
                      lambda run: stored_fingerprint(run, store.tracking_uri), store.experiment_id)


def current_codes(current: CodeFingerprint, trials: list[Trial]) -> set[str]:
    """The fingerprints of `trials`' current code, each trial's own (and the library's, as recorded before
    issue 53)."""
    return {current.digest} | {current.for_trial(trial.config).digest for trial in distinct(trials)}


def code_lines(check: CodeCheck, trials: list[Trial]) -> list[str]:
    """What `status` and `plan` say of the finished trials' code: the stale ones with the files that differ
    (and what `run` will do with them), those of unknown code."""
    lines = []
    if check.stale(trials):
        lines.append(f"{check.describe_stale(trials)}. `run` refuses to mix code versions: pass --retrain-stale "
                     "to train them again, or --keep-stale to keep them (the report marks them).")
    if check.unknown(trials):
        lines.append(check.describe_unknown(trials) + ".")
    return lines


def reused_from_others(check: CodeCheck, trials: list[Trial], study_name: str) -> dict[str, Any]:
    """{trial id: the run of another study that counts for it} of `trials` (the reused ones)."""
    from .store import STUDY_TAG

    found = {}
    for trial in trials:
        run = check.source.get(trial.trial_id)
        if run is not None and run.data.tags.get(STUDY_TAG, study_name) != study_name:
            found[trial.trial_id] = run
    return found

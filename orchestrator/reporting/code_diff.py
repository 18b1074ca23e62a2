"""`orchestrator diff STUDY --against REF`: a study's results at the current code against the same study at
another code version (issue 43): per cell (a row of the study and an evaluation length's perplexity) both
values, their difference with its seed-spread interval, and whether it moved beyond seed noise; the cells not
comparable and why; the files that differ between the two versions.

The two sides: the study's finished trials computed by the current code (study/code_identity.py; its own
runs and those of other studies of the store it reuses), against those of REF: a code fingerprint of runs in
the store, a git ref whose commit runs in the store ran, or another store holding the same study (its
finished trials, whatever their code).

A cell's difference is current minus REF over the seeds both sides finished (paired by seed). The report's
rule for seeds decides "moved": with at least MIN_SEEDS (3) pairs, the 95% t-interval of the paired
differences; moved when it excludes 0 (a difference with no spread at all moves when it is not 0). With
fewer pairs a cell that differs is "needs seeds" (the noise cannot be told: `run --decide` adds seeds).
"""

from __future__ import annotations

import math
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import dape_core.metric_names as names

from ..judging.stats import MIN_SEEDS
from ..study import Study
from ..study.code_identity import CodeFingerprint, changed_within, code_fingerprint
from ..tracking.code_check import CURRENT, store_code_check
from ..tracking.source import GIT_COMMIT_TAG, code_source
from ..tracking.store import CODE_TAG, LIBRARY_TAG, STOPPED_EARLY_TAG, STUDY_TAG, TRIAL_ID_TAG, StudyStore
from ..tracking.stored_code import stored_fingerprint
from ..trial.trials import StoredIdentities, Trial, distinct, expand

LEVEL = 0.95
MOVED, WITHIN_NOISE, UNCHANGED, NEEDS_SEEDS = "moved", "within noise", "unchanged", "needs seeds"


class DiffRefused(ValueError):
    """REF names nothing to compare with (one paragraph saying what there is), or another study's store."""


@dataclass
class Side:
    name: str
    runs: dict[str, object]  # trial id -> its finished run on this side
    fingerprints: list[CodeFingerprint] = field(default_factory=list)


@dataclass
class Cell:
    label: str
    metric: str
    current: float
    against: float
    pairs: int
    diff: float = math.nan
    low: float = math.nan
    high: float = math.nan
    verdict: str = ""


@dataclass
class StudyDiff:
    study: str
    current: Side
    against: Side
    cells: list[Cell]
    not_comparable: list[tuple[str, str]]  # (row, why)
    files: list[str]


def _finished(run) -> bool:
    return run.info.status == "FINISHED" and run.data.tags.get(STOPPED_EARLY_TAG) != "true"


def _latest_by_trial(runs: list, keep) -> dict[str, object]:
    found: dict[str, object] = {}
    for run in sorted(runs, key=lambda run: run.info.start_time or 0):
        if _finished(run) and keep(run):
            found[run.data.tags.get(TRIAL_ID_TAG)] = run
    return found


def _fingerprints(side_runs: dict[str, object], tracking_uri: str) -> list[CodeFingerprint]:
    """One recorded fingerprint per code of the side's runs (read from one run of each)."""
    seen: dict[str, CodeFingerprint] = {}
    for run in side_runs.values():
        digest = run.data.tags.get(CODE_TAG)  # type: ignore[attr-defined]
        if digest and digest not in seen:
            recorded = stored_fingerprint(run, tracking_uri)
            if recorded is not None:
                seen[digest] = recorded
    return list(seen.values())


def _what_is_there(store: StudyStore, runs: list) -> str:
    by_code: dict[str, list] = {}
    for run in runs:
        if _finished(run):
            by_code.setdefault(run.data.tags.get(CODE_TAG) or "code unknown", []).append(run)
    if not by_code:
        return f"the store {store.tracking_uri} has no finished trial of study {store.study_name!r}"
    parts = []
    for code, group in sorted(by_code.items(), key=lambda item: -max(r.info.start_time or 0 for r in item[1])):
        commits = sorted({(r.data.tags.get(GIT_COMMIT_TAG) or "?")[:7] for r in group})
        parts.append(f"{code} ({len(group)} finished trial run(s), commit {', '.join(commits)})")
    return f"the store {store.tracking_uri} holds finished trials of study {store.study_name!r} by code: " + \
        "; ".join(parts)


def _git_commit(ref: str) -> str | None:
    root = code_source().root
    if root is None or not re.fullmatch(r"[\w./^~@{}-]+", ref):
        return None
    try:
        done = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], cwd=root,
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def _against_store(ref: str) -> str | None:
    """REF as another tracking store's URI, or None where it names no store."""
    if "://" in ref:
        return ref
    path = Path(ref)
    if path.suffix == ".db" or path.is_file():
        return f"sqlite:///{path.resolve()}"
    return None


def resolve_sides(study: Study, store: StudyStore, ref: str) -> tuple[Side, Side]:
    """The current code's side and REF's; DiffRefused where REF names nothing comparable."""
    current = code_fingerprint(study.plugin_payloads())
    trials = distinct(expand(study))
    identities = StoredIdentities(trials)
    tags = {tag for trial in trials for tag in identities.candidates(trial)}
    runs = store.trial_runs()
    check = store_code_check(store, trials, current, runs)
    mine = {tag: run for trial_id, run in check.source.items() if check.states.get(trial_id) == CURRENT
            for tag in [run.data.tags.get(TRIAL_ID_TAG)]}  # each trial's run of its own current files
    ours = Side(f"current code {current.digest}", mine, [current.for_trial(trial.config) for trial in trials])
    uri = _against_store(ref)
    if uri is not None:
        from ..tracking.lookup import StudyNotFound
        from ..tracking.readers import reader_for

        try:
            other = StudyStore.open(uri, study.name)
        except StudyNotFound:
            try:
                reader = reader_for(uri)
                held = reader.experiment_names(STUDY_TAG)
            except Exception:  # noqa: BLE001 - the store itself cannot be read: said as such
                held = []
            raise DiffRefused(
                f"The store {uri} has no study {study.name!r} (it holds: {', '.join(held) or 'no study'}): a diff "
                "compares one study across code versions, not two studies. Nothing was compared.") from None
        theirs = _latest_by_trial(other.trial_runs(), lambda run: True)
        return ours, Side(f"store {uri}", theirs, _fingerprints(theirs, uri))
    if ref == current.digest:
        raise DiffRefused(f"{ref} is the current code: nothing to compare it with. Name another code version "
                          f"(a fingerprint or git ref of the store's trials) or another store: "
                          f"{_what_is_there(store, runs)}.")
    by_code = _latest_by_trial(runs + store.shared_runs(tags), lambda run: ref in (run.data.tags.get(CODE_TAG),
                                                                                  run.data.tags.get(LIBRARY_TAG)))
    if by_code:
        return ours, Side(f"code {ref}", by_code, _fingerprints(by_code, store.tracking_uri))
    commit = _git_commit(ref)
    if commit is not None:
        by_commit = _latest_by_trial(runs, lambda run: run.data.tags.get(GIT_COMMIT_TAG) == commit)
        if by_commit:
            return ours, Side(f"commit {commit[:7]} ({ref})", by_commit,
                              _fingerprints(by_commit, store.tracking_uri))
    what = (f"the git ref of commit {commit[:7]}, which no trial of the store ran" if commit else
            "neither a code fingerprint of the store's runs nor a git ref")
    raise DiffRefused(f"{ref!r} names no trial of study {study.name!r} ({what}): "
                      f"{_what_is_there(store, runs)}. Name one of those code fingerprints, a git ref whose commit "
                      "ran the study, or another store holding the study. Nothing was compared.")


def compare_sides(study: Study, current: Side, against: Side) -> StudyDiff:
    from ..judging.decision import student_quantile

    trials = expand(study)
    identities = StoredIdentities(trials)
    by_row: dict[str, list[Trial]] = {}
    for trial in trials:
        by_row.setdefault(trial.label, []).append(trial)
    cells, not_comparable = [], []
    for label, row in by_row.items():
        pairs: dict[str, list[tuple[float, float]]] = {}
        missing = {"current": 0, "against": 0}
        for trial in row:
            ours, theirs = identities.lookup(trial, current.runs), identities.lookup(trial, against.runs)
            missing["current"] += ours is None
            missing["against"] += theirs is None
            if ours is None or theirs is None:
                continue
            mine = names.by_length(ours.data.metrics, names.PPL)  # type: ignore[attr-defined]
            other = names.by_length(theirs.data.metrics, names.PPL)  # type: ignore[attr-defined]
            for length in sorted(set(mine) & set(other)):
                pairs.setdefault(f"ppl@{length}", []).append((mine[length], other[length]))
        if not pairs:
            why = []
            if missing["current"]:
                why.append(f"{missing['current']} of its {len(row)} trial(s) not finished by the current code")
            if missing["against"]:
                why.append(f"{missing['against']} of its {len(row)} trial(s) not finished by {against.name}")
            not_comparable.append((label, "; ".join(why) or "no perplexity both sides recorded"))
            continue
        for metric, values in pairs.items():
            a = np.array([v[0] for v in values])
            b = np.array([v[1] for v in values])
            d = a - b
            cell = Cell(label, metric, float(a.mean()), float(b.mean()), len(d), float(d.mean()))
            if np.all(d == 0):
                cell.verdict, cell.low, cell.high = UNCHANGED, 0.0, 0.0
            elif len(d) < MIN_SEEDS:
                cell.verdict = NEEDS_SEEDS
            else:
                spread = float(d.std(ddof=1))
                half = student_quantile(len(d) - 1, 1 - (1 - LEVEL) / 2) * spread / math.sqrt(len(d))
                cell.low, cell.high = cell.diff - half, cell.diff + half
                cell.verdict = MOVED if cell.low > 0 or cell.high < 0 else WITHIN_NOISE
            cells.append(cell)
    files = sorted({name for old in against.fingerprints for new in current.fingerprints
                    for name in changed_within(old, new) if not name.endswith(" (new)")})
    return StudyDiff(study.name, current, against, cells, not_comparable, files)


def _number(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.4g}"


def render_markdown(result: StudyDiff) -> str:
    lines = [f"# Diff: {result.study}", "",
             f"Current: {result.current.name} ({len(result.current.runs)} finished trial(s)); against: "
             f"{result.against.name} ({len(result.against.runs)} finished trial(s)). Difference: current minus "
             f"against, paired by seed; interval: {LEVEL:.0%} t-interval of the paired differences (at least "
             f"{MIN_SEEDS} seeds). Marked **moved** where it excludes 0; \"needs seeds\": fewer than {MIN_SEEDS} "
             "seeds to tell a difference from seed noise (`orchestrator run STUDY --decide` adds seeds).", "",
             "Files that differ: " + (", ".join(result.files) if result.files else
                                      "none recorded (the same code, or its files were not recorded)"), ""]
    if result.cells:
        lines += ["| row | metric | current | against | difference | interval | seeds | verdict |",
                  "|:--|:--|--:|--:|--:|:--|--:|:--|"]
        for cell in result.cells:
            interval = "–" if math.isnan(cell.low) else f"[{_number(cell.low)}, {_number(cell.high)}]"
            verdict = f"**{cell.verdict}**" if cell.verdict == MOVED else cell.verdict
            lines.append(f"| {cell.label} | {cell.metric} | {_number(cell.current)} | {_number(cell.against)} | "
                         f"{_number(cell.diff)} | {interval} | {cell.pairs} | {verdict} |")
        lines.append("")
    moved = sum(cell.verdict == MOVED for cell in result.cells)
    needs = sum(cell.verdict == NEEDS_SEEDS for cell in result.cells)
    lines.append(f"{moved} cell(s) moved beyond seed noise, {needs} need more seeds to say, "
                 f"{len(result.cells) - moved - needs} did not move.")
    if result.not_comparable:
        lines += ["", "Not comparable:"] + [f"- {label}: {why}" for label, why in result.not_comparable]
    return "\n".join(lines) + "\n"


def diff_file_name(ref: str) -> str:
    return "diff-" + re.sub(r"[^A-Za-z0-9._-]+", "_", ref).strip("_")[:80] + ".md"

"""A study's results as a pandas DataFrame, read from the MLflow store alone.

One row per trial: the run that counts for it (the latest finished one; else the latest one, so that a
failed or killed trial still shows), with its config as `config.<dotted key>` columns, the values its
row sweeps as `swept.<dotted key>` columns and one column per metric. Trials the study file defines but
the store has no run for appear with status MISSING, so that nothing is silently dropped.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

import dape_core.metric_names as names

from ..study import Study, StudyError, load_study
from ..study.locate import names_a_file, study_file
from ..tracking.params import NOT_APPLICABLE, effective_params
from ..tracking.store import (
    CODE_TAG,
    ENV_TAG_PREFIX,
    STOPPED_EARLY_TAG,
    STUDY_TAG,
    SWEPT_TAG_PREFIX,
    TEMPLATE_TAG,
    TRIAL_ID_TAG,
    StudyStore,
)
from ..tracking.uri import choose_store
from ..trial.trials import StoredIdentities, Trial, expand_stored, shared_rows
from .columns import CONFIG_PREFIX, IDENTITY_COLUMNS, MISSING, SERIES_METRICS, metric_columns
from .families import higher_is_better
from .layout import row_layout
from .protocol_note import run_columns


@dataclass(frozen=True)
class ValueChoice:
    """Which value of a metric's history a cell shows: the last one logged, the best one, or the one at a step."""

    kind: str = "final"  # "final" | "best" | "step"
    step: int | None = None

    @classmethod
    def parse(cls, text: str) -> "ValueChoice":
        text = text.strip().lower()
        if text in ("final", "best"):
            return cls(text)
        if text.startswith(("step:", "step=")) and text[5:].isdigit():
            return cls("step", int(text[5:]))
        raise ValueError(f"value {text!r}: expected 'final', 'best' or 'step:N' (e.g. step:500)")

    def describe(self, steps: str) -> str:
        if self.kind == "best":
            return "best value logged by each run (lowest for losses, perplexities and times; highest for accuracies)"
        if self.kind == "step":
            return f"value logged at step {self.step} of each run"
        return f"final value of each run (model after {steps} training steps)"


def _param_value(text: str) -> Any:
    """MLflow keeps params as text; numbers, booleans, None and lists come back as Python values. Parsed once
    per distinct text (a study's runs repeat a few hundred texts tens of thousands of times); a list or dict is
    each row's own copy."""
    value = _literal(text)
    return copy.deepcopy(value) if isinstance(value, (list, dict, set, tuple)) else value


@lru_cache(maxsize=8192)
def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)  # literals only: never evaluates code
    except (ValueError, SyntaxError):
        return text


def _run_row(run) -> dict:
    tags, info = run.data.tags, run.info
    row = {
        "label": tags.get("label", info.run_name), "variant": tags.get("variant"),
        "seed": int(tags.get("seed", 0)), "status": info.status, "baseline": tags.get("baseline") == "true",
        "row_index": int(tags.get("row_index", 0)), "in_study": False, "trial_id": tags.get(TRIAL_ID_TAG),
        "run_id": info.run_id, "run_name": info.run_name, "error": tags.get("error"),
        "device": tags.get("device"), "precision": tags.get("precision"), "data_hash": tags.get("data_hash"),
        "attention_kernels": tags.get("attention_kernels"),
        "code_version": tags.get("code_version"), "code_fingerprint": tags.get(CODE_TAG),
        "computed_by": tags.get(STUDY_TAG),
        "stopped_early": tags.get(STOPPED_EARLY_TAG) == "true",
        "template_id": tags.get(TEMPLATE_TAG), "block": "", "compare_with": None,
        "start_time": pd.Timestamp(info.start_time, unit="ms") if info.start_time else pd.NaT,
    }
    row.update({f"{CONFIG_PREFIX}{key}": _param_value(value) for key, value in run.data.params.items()})
    row.update({key: _param_value(value) for key, value in tags.items() if key.startswith(SWEPT_TAG_PREFIX)})
    row.update({key: value for key, value in tags.items() if key.startswith(ENV_TAG_PREFIX)})  # as text
    # Not the system metrics' timelines (their last sample says little): the trial's means of them are metrics.
    row.update({key: value for key, value in run.data.metrics.items()
                if key not in SERIES_METRICS and not key.startswith(names.SYSTEM_PREFIX)})
    row.update(run_columns(tags, bool(names.by_length(run.data.metrics, names.PPL))))
    return row


def _counting_run(runs: list, code: str = "", own: str = "", current_runs: set[str] | None = None) -> Any:
    """Of a trial's runs (a trial redone after a crash has several), the one that counts: a finished one of the
    current `code` where there is one (this study's, experiment `own`, before another study's), else the latest
    finished one of this study, else the latest."""
    finished = [run for run in runs if run.info.status == "FINISHED"]
    current = [run for run in finished if code and run.data.tags.get(CODE_TAG) == code
               or run.info.run_id in (current_runs or ())]
    mine = [run for run in finished if not own or run.info.experiment_id == own]
    return max(current or mine or finished or runs,
               key=lambda run: (run.info.experiment_id == own, run.info.start_time or 0))


def _select_values(store: StudyStore, frame: pd.DataFrame, choice: ValueChoice) -> pd.DataFrame:
    """Replace each metric cell by the chosen value of its history ("final" is what MLflow already keeps)."""
    if choice.kind == "final" or frame.empty:
        return frame
    frame = frame.copy()
    for column in metric_columns(frame):
        for index, run_id in frame["run_id"].items():
            if not isinstance(run_id, str):
                continue
            history = store.metric_history(run_id, column)
            if choice.kind == "step":
                points = [m.value for m in history if m.step == choice.step]
                frame.at[index, column] = points[-1] if points else float("nan")
            elif history:
                values = [m.value for m in history]
                frame.at[index, column] = max(values) if higher_is_better(column) else min(values)
    return frame


def study_results(store: StudyStore, study: Study | None = None, value: ValueChoice = ValueChoice(),
                  trials: list[Trial] | None = None) -> pd.DataFrame:
    """One row per trial (see the module's docstring). With the study, rows follow the study file: its labels,
    its row order, its baselines, and a MISSING row for every trial the store has no run for. A sampling
    search's rows are its samples (`_search_rows`). `trials`: the study expanded (`expand(study)`), where the
    caller has it already."""
    runs = store.trial_runs()
    if study is None:
        rows = _grid_rows(runs, None, [])
        for row in rows:
            row["in_study"] = True
    else:
        if trials is None:
            trials = expand_stored(study, {run.data.tags.get(TRIAL_ID_TAG) for run in runs})  # with seeds decide added
        if study.search.sampled:
            rows = _search_rows(runs, trials)
        else:
            from ..study.code_identity import code_fingerprint
            from ..tracking.code_check import CURRENT, store_code_check

            library = code_fingerprint(study.plugin_payloads())
            check = store_code_check(store, trials, library, runs)
            # a trial's run of its current code (its own files unchanged: issue 53) reads as the current code
            current = {run.info.run_id for trial_id, run in check.source.items()
                       if check.states.get(trial_id) == CURRENT}
            runs = runs + [run for run in check.source.values() if run.info.run_id in current
                           and run.info.experiment_id != store.experiment_id]
            rows = _grid_rows(runs, study, trials, library.digest, store.experiment_id, current)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return pd.DataFrame(columns=IDENTITY_COLUMNS)
    for column in [c for c in frame.columns if c.startswith(CONFIG_PREFIX) and frame[c].isna().any()]:
        # a setting some runs did not log (one their trial does not read): None there, and the others' values as
        # they logged them (not a float column that would show a kernel of 3 as 3.0)
        frame[column] = pd.Series([row.get(column) for row in rows], index=frame.index, dtype=object)
    frame = _unset_marked(_select_values(store, frame, value))
    ordered = [c for c in IDENTITY_COLUMNS if c in frame.columns]
    rest = sorted(c for c in frame.columns if c not in ordered)
    frame = frame[ordered + rest].sort_values(["in_study", "row_index", "seed"], ascending=[False, True, True])
    return frame.reset_index(drop=True)


def _other_studies_runs(store: StudyStore, trials: list[Trial], code: str) -> list:
    """The finished runs of the store's other studies of this study's trials and of the current code (`run`
    reuses them: issue 43); their rows say which study computed them (`computed_by`)."""
    identities = StoredIdentities(trials)
    return store.shared_runs({tag for trial in trials for tag in identities.candidates(trial)}, code)


def _unset_marked(frame: pd.DataFrame) -> pd.DataFrame:
    """One marker for a setting without a value: a config cell logged as `None` (unset) reads NOT_APPLICABLE
    like the settings a trial does not read, and a config column that is None in every trial (`config.che`
    outside CHE studies) is left out."""
    config = [c for c in frame.columns if c.startswith(CONFIG_PREFIX)]
    if not config:
        return frame
    cells = frame[config].astype(object)
    unset = cells.isna()
    frame = frame.drop(columns=[c for c in config if unset[c].all()])
    kept = [c for c in config if not unset[c].all() and unset[c].any()]
    if kept:
        frame[kept] = cells[kept].where(~unset[kept], NOT_APPLICABLE)
    return frame


def _grid_rows(runs: list, study: Study | None, expected: list[Trial], code: str = "",
               own: str = "", current_runs: set[str] | None = None) -> list[dict]:
    """Each row of the study file with the run that counts for its trial; rows that share a trial (they
    differ only in settings it does not read) each read its one run, the later ones saying whose
    (`shared_with`: the first row's label). Then the store's runs of no row of the study (in_study False).
    Without the study: every stored run, and `expected` is not read."""
    by_trial: dict[str, list] = {}
    for run in runs:
        by_trial.setdefault(run.data.tags.get(TRIAL_ID_TAG) or run.info.run_id, []).append(run)
    stored = {trial_id: _run_row(_counting_run(group, code, own, current_runs)) for trial_id, group in by_trial.items()}
    for row in stored.values():  # a run of its trial's current code: the current code, whatever its grain
        if row["run_id"] in (current_runs or ()):
            row["code_fingerprint"] = code
    if study is None:
        return list(stored.values())
    identities, shared = StoredIdentities(expected), shared_rows(expected)
    places = row_layout(study)
    rows, used = [], set()
    for position, trial in enumerate(expected):
        tag = identities.lookup(trial, {tag: tag for tag in stored})
        if tag is None:
            row = {"status": MISSING, "trial_id": trial.trial_id, "run_id": None,
                   **{f"{CONFIG_PREFIX}{k}": v for k, v in effective_params(trial.config).items()},
                   **{f"{SWEPT_TAG_PREFIX}{k}": v for k, v in trial.overrides.items()}}
        else:
            used.add(tag)
            row = dict(stored[tag])
            if position in shared:  # the run's swept tags are its first row's: this row's own values
                row = {key: value for key, value in row.items() if not key.startswith(SWEPT_TAG_PREFIX)}
                row.update({f"{SWEPT_TAG_PREFIX}{k}": v for k, v in trial.overrides.items()})
        # The study file names the rows (a relabelled variant keeps its runs: identity is the config hash).
        place = places[trial.label]
        row.update(label=trial.label, variant=trial.variant, seed=trial.seed, baseline=place.is_baseline,
                   row_index=place.order, block=place.block, compare_with=place.compare_with, in_study=True,
                   shared_with=expected[shared[position]].label if position in shared else None)
        rows.append(row)
    return rows + [row for tag, row in stored.items() if tag not in used]


def _search_rows(runs: list, templates: list[Trial]) -> list[dict]:
    """A search's samples: every run sampled from one of the study file's rows (its `template_id` tag), one row
    each in sampling order, labelled by their sampled values (numbered where two samples drew the same). No
    MISSING rows: the samples are what ran."""
    ids = {t.trial_id for t in templates} | {t.legacy_id for t in templates}
    rows: list[dict] = []
    seen: dict[str, int] = {}  # how many samples so far drew each label's values
    for order, run in enumerate(sorted(runs, key=lambda run: run.info.start_time or 0)):
        row = _run_row(run)
        template = row.get("template_id")
        row["in_study"] = template in ids
        if row["in_study"]:
            seen[row["label"]] = seen.get(row["label"], 0) + 1
            if seen[row["label"]] > 1:
                row["label"] = f"{row['label']} ({seen[row['label']]})"
        row.update(row_index=order, baseline=False, block="", compare_with=None)
        rows.append(row)
    return rows


def load_results(study: Study | str | Path, tracking_uri: str | None = None, value: str = "final") -> pd.DataFrame:
    """For notebooks: `load_results("studies/kernel_size.yaml")` -> one row per trial, config and metric columns.

    `study` is a study file, a study's name (its file `studies/<name>.yaml` under the current folder when
    there is one; else rows come from the store alone), or a parsed Study. `tracking_uri` defaults like the
    command line's: MLFLOW_TRACKING_URI, else mlruns/mlflow.db in the study's project folder (the folder
    holding its studies/ folder), so a study file is found with its store from any folder."""
    parsed, path = (study, None) if isinstance(study, Study) else (None, _study_file_of(study))
    if path is not None:
        parsed = load_study(path)
    name = parsed.name if parsed is not None else str(study)
    chosen = choose_store(tracking_uri, path)
    store = StudyStore.open(chosen.uri, name, chosen.how)
    return study_results(store, parsed, ValueChoice.parse(value))


def _study_file_of(argument: str | Path) -> Path | None:
    """The study file an argument names (study/locate.py's rule), or None for a name without a file."""
    if names_a_file(argument):
        return study_file(argument)
    try:
        return study_file(argument)
    except StudyError:
        return None


def metric_history(store: StudyStore, frame: pd.DataFrame, metric: str) -> pd.DataFrame:
    """The per-step history of one metric for every run in `frame`: label, seed, step, value (long form)."""
    rows = []
    for _, trial in frame.iterrows():
        if not isinstance(trial.get("run_id"), str):
            continue
        for point in store.metric_history(trial["run_id"], metric):
            rows.append({"label": trial["label"], "row_index": trial["row_index"], "seed": trial["seed"],
                         "run_id": trial["run_id"], "step": point.step, "value": point.value})
    return pd.DataFrame(rows, columns=["label", "row_index", "seed", "run_id", "step", "value"])

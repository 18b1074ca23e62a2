"""The report's setup summary, at its top: what was trained, on what, for how long, where (model shape and
parameter count, data and tokens seen, steps, device), from the trials' logged params and metrics. Each
fact lists the distinct values across the finished trials (a model-size study has several shapes); a setting
that differs between the study's rows says so with the rows of each value ("score processor by row: DAPE V2
(4 rows), none (1 row)"), never as a list that reads like one model with two processors. The device is named
once, here, with its hardware where the runs recorded it; the rest of the provenance (versions, commit) is a
section after the tables (document.provenance)."""

from __future__ import annotations

import pandas as pd

import dape_core.metric_names as names
from dape_core import PRESETS

from ..tracking.store import ENV_TAG_PREFIX
from .names import value as value_words
from .provenance import hardware
from .tables import CODE_MARK


def _values(frame: pd.DataFrame, column: str) -> list:
    if column not in frame:
        return []
    return sorted({v for v in frame[column].dropna() if v != "n/a"}, key=str)


def _range(frame: pd.DataFrame, column: str, unit: float, suffix: str) -> str | None:
    if column not in frame or not frame[column].notna().any():
        return None
    low, high = frame[column].min() / unit, frame[column].max() / unit
    return f"{low:.2f}{suffix}" if round(low, 2) == round(high, 2) else f"{low:.2f}–{high:.2f}{suffix}"


def _shape(preset) -> str:
    layers, width, heads = PRESETS.get(preset, (None, None, None))
    return f"{preset} ({layers} layers, width {width}, {heads} heads)" if layers else str(preset)


def _by_row(frame: pd.DataFrame, column: str, words) -> str:
    """One value in words, or, where the rows differ, each value with how many of the study's rows have it."""
    values = _values(frame, column)
    if len(values) <= 1:
        return ", ".join(words(v) for v in values)
    rows = frame.drop_duplicates("label") if "label" in frame else frame
    counts = rows[column].value_counts()
    parts = [f"{words(v)} ({int(counts.get(v, 0))} row{'' if counts.get(v, 0) == 1 else 's'})" for v in values]
    return "by row: " + ", ".join(parts)


def _device(frame: pd.DataFrame) -> str:
    """The device and precision the trials ran on, with the hardware where the runs recorded it."""
    devices = ", ".join(map(str, _values(frame, "device")))
    precisions = ", ".join(map(str, _values(frame, "precision")))
    recorded = frame[[c for c in frame if c == "device" or c.startswith(ENV_TAG_PREFIX)]].drop_duplicates()
    machines = sorted({text for text in (hardware(row) for _, row in recorded.iterrows()) if text})
    if machines:  # "cpu: AMD EPYC ... (16 CPU cores on the machine)" names the device itself
        return " | ".join(machines) + (f"; precision {precisions}" if precisions else "")
    return devices + (f" ({precisions})" if precisions else "")


def setup_summary(trials: pd.DataFrame, current_code: str = "", study_name: str = "") -> list[tuple[str, str]]:
    """(name, text) facts of the finished trials (all trials where none finished). `current_code`: the code
    fingerprint of the checkout building the report, said where the trials' differs. `study_name`: the trials
    another study of the store computed (reused: issue 43) are said with it."""
    finished = trials[trials["status"] == "FINISHED"] if "status" in trials else trials
    frame = finished if not finished.empty else trials
    facts = []
    shapes = _by_row(frame, "config.model.preset", _shape)
    encodings = _by_row(frame, "config.model.pos_encoding", lambda v: value_words("pos_encoding", v))
    processors = _by_row(frame, "config.model.processor", lambda v: value_words("processor", v))
    if shapes:
        facts.append(("model", shapes + (f"; position encoding {encodings}" if encodings else "")
                      + (f"; score processor {processors}" if processors else "")))
    parameters = _range(frame, names.NUM_PARAMETERS, 1e6, "M")
    if parameters:
        facts.append(("parameters", parameters))
    sources = []
    for source in _values(frame, "config.data.source"):
        paths = _values(frame[frame["config.data.source"] == source], "config.data.path")
        sources.append(f"{source}" + (f" ({', '.join(map(str, paths))})" if paths else ""))
    tokens = _range(frame, names.TOKENS_SEEN, 1e6, "M tokens seen per trial")
    data = sources + ([tokens] if tokens else [])
    if data:
        facts.append(("data", "; ".join(data)))
    steps = "/".join(map(str, _values(frame, "config.train.steps")))
    batch = "/".join(map(str, _values(frame, "config.train.batch_size")))
    length = "/".join(map(str, _values(frame, "config.train.seq_len")))
    if steps:
        facts.append(("training", f"{steps} steps of {batch} x {length} tokens"))
    if _values(frame, "device"):
        facts.append(("device", _device(frame)))
    code = code_versions(finished, current_code)
    if code:
        facts.append(("code", code))
    reused = reused_from(finished, study_name)
    if reused:
        facts.append(("reused", reused))
    return facts


def reused_from(finished: pd.DataFrame, study_name: str) -> str | None:
    """The trials another study of the store computed (same config and code), by study, with their runs."""
    if not study_name or "computed_by" not in finished:
        return None
    others = finished[finished["computed_by"].notna() & (finished["computed_by"] != study_name)]
    if others.empty:
        return None
    parts = []
    for study, group in others.groupby("computed_by"):
        runs = ", ".join(sorted(str(run) for run in group["run_id"].dropna().unique()))
        parts.append(f"{study} ({len(group)} trial{'' if len(group) == 1 else 's'}: run {runs})")
    return (f"{len(others)} trial(s) computed by other studies of this store with the same config and code, "
            "not trained again: " + "; ".join(parts))


MIXED_MARK = CODE_MARK  # a trial computed by other code than most of the report's (trials table, tables)


def code_versions(finished: pd.DataFrame, current: str = "") -> str | None:
    """The code fingerprints (study/code_identity.py) of the finished trials, each with its count; where they
    differ, said so: the report mixes code versions, the trials of the others marked MIXED_MARK; where none is
    `current` (the code building the report), said too."""
    if "code_fingerprint" not in finished or finished.empty:
        return None
    counts = finished["code_fingerprint"].fillna("unknown").value_counts()
    if current and set(counts.index) - {"unknown", current}:
        text = code_versions(finished) or ""
        return text + (f"; the current code is {current}: the trials of other code were kept (run --keep-stale); "
                       "`orchestrator status` names the files that differ")
    if list(counts.index) == ["unknown"]:
        return "code unknown (runs from before the code fingerprint was recorded)"
    parts = [f"{value} ({int(n)} trial{'' if n == 1 else 's'})" for value, n in counts.items()]
    if len(counts) == 1:
        return f"fingerprint {parts[0]}"
    return (f"MIXED code versions: {', '.join(parts)}; the trials of other code than {counts.index[0]} are marked "
            f"{MIXED_MARK} in the trials table, and their rows {MIXED_MARK} after n in the tables")


def code_marks(trials: pd.DataFrame) -> pd.Series | None:
    """Per trial, its code fingerprint, marked where the finished trials mix code versions and it is not the most
    common one; None where they do not mix."""
    if "code_fingerprint" not in trials:
        return None
    finished = trials[trials["status"] == "FINISHED"] if "status" in trials else trials
    counts = finished["code_fingerprint"].fillna("unknown").value_counts()
    if len(counts) <= 1:
        return None
    common = counts.index[0]
    return trials["code_fingerprint"].fillna("unknown").map(
        lambda value: value if value == common else f"{MIXED_MARK} {value}")

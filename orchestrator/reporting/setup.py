"""The report's setup summary, at its top: what was trained, on what, for how long, where (model shape and
parameter count, data and tokens seen, steps, device), from the trials' logged params and metrics. Each
fact lists the distinct values across the finished trials (a model-size study has several shapes). The
provenance of the numbers (versions, commit) is another block (document.provenance)."""

from __future__ import annotations

import pandas as pd

import dape_core.metric_names as names
from dape_core import PRESETS

from .names import value as value_words


def _values(frame: pd.DataFrame, column: str) -> list:
    if column not in frame:
        return []
    return sorted({v for v in frame[column].dropna() if v != "n/a"}, key=str)


def _range(frame: pd.DataFrame, column: str, unit: float, suffix: str) -> str | None:
    if column not in frame or not frame[column].notna().any():
        return None
    low, high = frame[column].min() / unit, frame[column].max() / unit
    return f"{low:.2f}{suffix}" if round(low, 2) == round(high, 2) else f"{low:.2f}–{high:.2f}{suffix}"


def setup_summary(trials: pd.DataFrame) -> list[tuple[str, str]]:
    """(name, text) facts of the finished trials (all trials where none finished)."""
    finished = trials[trials["status"] == "FINISHED"] if "status" in trials else trials
    frame = finished if not finished.empty else trials
    facts = []
    shapes = []
    for preset in _values(frame, "config.model.preset"):
        layers, width, heads = PRESETS.get(preset, (None, None, None))
        shapes.append(f"{preset} ({layers} layers, width {width}, {heads} heads)" if layers else str(preset))
    encodings = ", ".join(value_words("pos_encoding", v) for v in _values(frame, "config.model.pos_encoding"))
    processors = ", ".join(value_words("processor", v) for v in _values(frame, "config.model.processor"))
    if shapes:
        facts.append(("model", "; ".join(shapes) + (f"; position encoding {encodings}" if encodings else "")
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
    devices = ", ".join(map(str, _values(frame, "device")))
    precisions = ", ".join(map(str, _values(frame, "precision")))
    if devices:
        facts.append(("device", devices + (f" ({precisions})" if precisions else "")))
    return facts

"""Which timings the report's time-cost table shows, and what its caption says about them.

A trial timed alone by `orchestrator evaluate --time` (`isolated_ms_per_step`, `isolated_ms_forward_<L>`: one
stored model at a time, nothing else on the device) has those in its `ms_per_step` / `ms_forward_<L>` cells
and in the claims on them; a trial without them keeps its in-training timings, and the caption says how many
trials shared the device while they were taken (`concurrent_trials_max`, tracking/sharing.py). results.csv
keeps both, as logged.
"""

from __future__ import annotations

import pandas as pd

import dape_core.metric_names as names

ISOLATED = names.ISOLATED_PREFIX
SHARING = names.CONCURRENT_TRIALS_MAX
_ISOLATED_TIMINGS = (names.isolated(names.MS_PER_STEP), names.isolated(names.MS_FORWARD))  # and their quartiles


def _isolated_columns(frame: pd.DataFrame) -> dict[str, str]:
    """{in-training column: its isolated column} for the medians (not their quartiles)."""
    out = {}
    for column in frame.columns:
        if column.startswith(ISOLATED) and column.startswith(_ISOLATED_TIMINGS) \
                and not column.endswith(names.QUARTILE_SUFFIXES):
            out[column.removeprefix(ISOLATED)] = column
    return out


def prefer_isolated(frame: pd.DataFrame) -> pd.DataFrame:
    """The trials' frame with each timing replaced by its isolated one where the trial has it."""
    pairs = _isolated_columns(frame)
    if not pairs:
        return frame
    frame = frame.copy()
    for column, isolated in pairs.items():
        alone = frame[isolated].notna()
        if column not in frame.columns:
            frame[column] = float("nan")
        frame.loc[alone, column] = frame.loc[alone, isolated]
    return frame


def timing_note(frame: pd.DataFrame) -> str:
    """What the time table's ms cells are, row by row: isolated, or how many trials shared the device."""
    finished = frame[frame["status"] == "FINISHED"] if "status" in frame.columns else frame
    if finished.empty or not any(column.startswith(names.TIMING_PREFIX) for column in finished.columns):
        return ""
    alone_column = names.isolated(names.MS_PER_STEP)
    alone = finished[alone_column].notna() if alone_column in finished.columns else pd.Series(False, finished.index)
    parts = []
    if alone.any():
        repeats = (finished.loc[alone, names.ISOLATED_REPEATS].dropna() if names.ISOLATED_REPEATS in finished
                   else pd.Series(dtype=float))
        times = f"{int(repeats.max())} repeats" if len(repeats) else "repeats"
        labels = sorted(set(finished.loc[alone, "label"]))
        parts.append(f"ms cells of {_names(labels)} are isolated timings (orchestrator evaluate --time: one stored "
                     f"model at a time with nothing else on the device, median of {times} after warm-ups; quartiles "
                     "in results.csv as isolated_*_q1/_q3).")
    contended = finished[~alone]
    if not contended.empty:
        shared = contended[SHARING] if SHARING in contended.columns else pd.Series(dtype=float)
        known = shared.dropna()
        labels = sorted(set(contended["label"]))
        if known.empty:
            parts.append(f"ms cells of {_names(labels)} were timed during training; how many trials shared the "
                         "device then was not recorded (trained before it was).")
        else:
            most = int(known.max())
            alone_too = "alone" if most == 1 else f"with up to {most} trials at once on the device"
            parts.append(f"ms cells of {_names(labels)} were timed during training, {alone_too} "
                         f"({SHARING} per trial in results.csv); `orchestrator evaluate --time` times them alone.")
    return " " + " ".join(parts)


def _names(labels: list[str]) -> str:
    return ", ".join(labels[:8]) + (" ..." if len(labels) > 8 else "")

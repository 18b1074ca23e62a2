"""What a claim's check must say about the evaluation protocols its sides were measured under (docs/protocol.md).

A run without the `eval.protocol` tag was measured under protocol 1, whose windows depended on the longest
length evaluated with them: a length `orchestrator evaluate` added later scored other text than the row's other
lengths. A check that reads such a length in a ratio across lengths, or sides measured under different
protocols, says so (the report's captions say the same of its tables and plots: reporting/protocol_note.py).
"""

from __future__ import annotations

import pandas as pd

PROTOCOL_COLUMN, LATER_COLUMN = "eval_protocol", "evaluated_later"  # the results frame's columns, one per run


def mixed_rows(frame: pd.DataFrame) -> dict[str, list[int]]:
    """Rows of protocol 1 with lengths evaluated later: label -> those lengths (scored on other text)."""
    if PROTOCOL_COLUMN not in frame or frame.empty:
        return {}
    out: dict[str, list[int]] = {}
    for row in frame.to_dict("records"):
        if row.get(PROTOCOL_COLUMN) == 1 and row.get(LATER_COLUMN):
            lengths = out.setdefault(row["label"], [])
            lengths += [int(text) for text in str(row[LATER_COLUMN]).split() if int(text) not in lengths]
    return out


def _length(column: str | None) -> int | None:
    if not column:
        return None
    tail = column.rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else None


def check_caveat(frame: pd.DataFrame, terms: list) -> str:
    """What a claim's check must say about protocols (terms: its sides, each with `label`, `column` and an
    optional `over`): a ratio across lengths one of which a protocol-1 row scored later on other text, or
    sides measured under different protocols. "" where the check reads one text under one protocol."""
    if PROTOCOL_COLUMN not in frame or frame.empty:
        return ""
    mixed = mixed_rows(frame)
    notes = []
    for term in terms:
        later = set(mixed.get(term.label, ()))
        lengths = {n for n in (_length(term.column), _length(term.over)) if n is not None}
        if term.over and lengths & later:
            notes.append(f"{term.label}'s L={', '.join(map(str, sorted(lengths & later)))} scored later on other text")
    versions = {int(value) for label in {term.label for term in terms}
                for value in frame.loc[frame["label"] == label, PROTOCOL_COLUMN].dropna()}
    if len(versions) > 1:
        notes.append(f"sides measured under protocols {', '.join(map(str, sorted(versions)))}")
    return f" (caution: {'; '.join(notes)}; docs/protocol.md)" if notes else ""

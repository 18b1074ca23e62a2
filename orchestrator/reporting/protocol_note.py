"""What the report says about the evaluation protocol its per-length columns were measured under
(docs/protocol.md): one sentence for the by-length tables' captions and their plots (what a claim says of it:
judging/caveats.py).

Protocol 2 (dape_core.evaluate.config.PROTOCOL_VERSION) scores the same tail tokens at every length, whenever a
length is evaluated. A run without the `eval.protocol` tag was measured under protocol 1, whose windows depended
on the longest length evaluated with them: a length `orchestrator evaluate` added later scored other text than
the row's other lengths. The note names those rows and lengths, so that no column, ratio or claim mixes text
or protocols without saying so.
"""

from __future__ import annotations

import pandas as pd

from dape_core.evaluate.config import PROTOCOL_VERSION

from ..judging.caveats import LATER_COLUMN, PROTOCOL_COLUMN, mixed_rows
from ..trial.protocol import evaluated_later, measured_under


def run_columns(tags: dict[str, str], has_lengths: bool) -> dict:
    """A run's protocol columns: the protocol of its per-length metrics (None where it has none, CHE), and
    the lengths `orchestrator evaluate` scored later ("" where none, else "1024" or "1024 2048")."""
    if not has_lengths:
        return {PROTOCOL_COLUMN: None, LATER_COLUMN: ""}
    return {PROTOCOL_COLUMN: measured_under(tags), LATER_COLUMN: " ".join(map(str, sorted(evaluated_later(tags))))}


def protocol_note(frame: pd.DataFrame, plain: bool = True) -> str:
    """The caption's sentence: the protocol of every row, or which rows and columns differ and how. `plain`:
    say it also where every row has the current protocol (tables do; a plot's caption only warns)."""
    if PROTOCOL_COLUMN not in frame or frame[PROTOCOL_COLUMN].isna().all():
        return ""
    measured = frame[frame[PROTOCOL_COLUMN].notna()]
    versions = sorted({int(value) for value in measured[PROTOCOL_COLUMN]})
    if versions == [PROTOCOL_VERSION]:
        return "" if not plain else (f" Evaluation protocol {PROTOCOL_VERSION}: every length scores the same tail "
                                     "tokens of the held-out stream, the lengths differing only in the context "
                                     "before them.")
    parts = []
    if len(versions) > 1:
        by_version = {version: sorted(set(measured[measured[PROTOCOL_COLUMN] == version]["label"]))
                      for version in versions}
        parts.append("Rows measured under different evaluation protocols (" + "; ".join(
            f"protocol {version}: {', '.join(labels)}" for version, labels in by_version.items())
            + "): compare rows only within one protocol.")
    else:
        parts.append(f"Every row was measured under evaluation protocol {versions[0]}, whose windows depend on the "
                     "longest length evaluated with them.")
    mixed = mixed_rows(measured)
    if mixed:
        shown = "; ".join(f"{label} at L={', '.join(map(str, lengths))}" for label, lengths in mixed.items())
        parts.append(f"Scored later by `orchestrator evaluate` on other text than the row's other lengths: {shown}; "
                     "compare those cells within their column only (their ratio, Δ and lines across lengths mix "
                     "text).")
    parts.append(f"`orchestrator evaluate` scores the rows again under protocol {PROTOCOL_VERSION}.")
    return " " + " ".join(parts)

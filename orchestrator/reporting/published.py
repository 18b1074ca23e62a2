"""The papers' numbers beside ours: each published value of the profile the study was loaded with (the study's
`published:` section, resolved against its rows by study/published_checks.py), next to the measured cell it
describes (mean ± std over the row's finished seeds) and the difference. The file as written (the CPU
default) has none: its setting matches no paper's, so nothing is shown."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

import dape_core.metric_names as names

from ..judging.diverged import DIVERGED
from ..judging.diverged import diverged as diverged_values
from ..study import Study
from ..study.published_checks import resolve_published


@dataclass
class PublishedLine:
    label: str  # the report row
    metric: str  # the results column (ppl_8192, ms_per_step, ...)
    published: float
    paper_row: str  # the paper's own name for the row and its setting: "DAPE-NoPE (Arxiv, 125M, train 512)"
    location: str  # where the paper gives it: paper, table or section (or rebuttal), column
    note: str  # what is known and assumed in reading the number as this metric ("" where nothing is)
    mean: float  # measured: mean over the row's finished seeds (NaN: not measured yet)
    std: float
    seeds: int
    diverged: int = 0  # seeds whose value diverged or overflowed (judging/diverged.py): no mean is taken then

    @property
    def difference(self) -> float:
        """Measured minus published."""
        return self.mean - self.published

    @property
    def ratio(self) -> float:
        return self.mean / self.published if self.published else math.nan

    def texts(self) -> list[str]:
        """The line's cells (HEADER): row, metric, published (with its note), the paper's row and setting,
        where the paper gives it, ours, difference (and ratio), seeds."""
        if self.diverged:
            measured = f"{DIVERGED} ({self.diverged} of {self.seeds} seeds)"
        else:
            measured = "not measured yet" if not math.isfinite(self.mean) else (
                f"{self.mean:.3f}" + (f" ± {self.std:.3f}" if math.isfinite(self.std) else ""))
        difference = "–" if not math.isfinite(self.mean) else (
            f"{self.difference:+.3f}" + (f" (×{self.ratio:.2f})" if math.isfinite(self.ratio) else ""))
        published = f"{self.published:g}" + (f" ({self.note})" if self.note else "")
        return [self.label, _metric_words(self.metric), published, self.paper_row, self.location, measured,
                difference, str(self.seeds)]


HEADER = ["row", "metric", "published", "the paper's row (setting)", "where the paper gives it",
          "ours (mean ± std)", "ours − published (ours / published)", "n"]
CAPTION = ("The papers' numbers for this profile (the study file's `published:` section), each under the paper's "
           "own name for its row and setting and with where the paper gives it, beside the cells measured here: "
           "the mean ± std over the row's finished seeds, and the difference. The papers' values come from their "
           "own runs (their data order, seeds and code), so a difference of a few percent is within what a "
           "reproduction differs by; one of a different order is worth a look.")
PAPERS_TAIL_TOKENS = 256  # the papers' protocol: the loss of the last 256 positions of every window (docs/method.md §6)


def _metric_words(column: str) -> str:
    for prefix in (names.PPL, names.DELTA_P, names.MS_FORWARD, names.ACC):
        length = names.length_of(column, prefix)
        if length is not None:
            return f"{names.family(prefix)} L={length}"
    return column


def published_lines(study: Study, trials: pd.DataFrame) -> list[PublishedLine]:
    """The profile's published values beside the measured cells of `trials` (the frame the tables read)."""
    if study._profile is None or not study.published_here():  # noqa: SLF001  the profile it was loaded with
        return []
    cells, _ = resolve_published(study, study._profile)  # noqa: SLF001
    finished = trials[trials["status"] == "FINISHED"] if "status" in trials else trials
    lines = []
    for cell in cells:
        values = (finished.loc[finished["label"] == cell.label, cell.column].dropna().to_numpy(dtype=float)
                  if cell.column in finished else np.array([]))
        where = cell.value.location
        bad = int(diverged_values(values).sum())
        usable = len(values) > 0 and not bad  # a diverged seed is named, never averaged
        lines.append(PublishedLine(cell.label, cell.column, cell.value.value, f"{where.row} ({where.setting})",
                                   f"{where.paper}, {where.table}, column {where.column}", cell.value.note or "",
                                   float(values.mean()) if usable else math.nan,
                                   float(values.std(ddof=1)) if usable and len(values) > 1 else math.nan,
                                   len(values), bad))
    return lines


def published_notes(study: Study) -> list[str]:
    """What the published section says besides its table, at the profile the study was loaded with: why the
    papers give no number for its setting (the study's `unpublished:`), and which rows score a shorter tail
    than the papers' protocol and what they score instead. None for the file as written."""
    if study._profile is None or not (study.published_here() or study.unpublished_here()):  # noqa: SLF001
        return []
    notes = [f"No published value: {study.unpublished_here()}"] if study.unpublished_here() else []
    tail = tail_note(study)
    return notes + ([tail] if tail else [])


def tail_note(study: Study) -> str:
    """The rows whose scored tail is shorter than the papers' (PAPERS_TAIL_TOKENS), and what they score: "" where
    every row scores the papers' tail (or the study scores no language-model tail: CHE)."""
    from ..study.trial_checks import resolved_rows

    try:
        rows = resolved_rows(study)
    except Exception:  # the rows' own problems are the validation's
        return ""
    shorter: dict[tuple[int, int], int] = {}  # (tail, training length) -> rows
    for row in rows:
        config = row.config
        if config.che is None and config.eval.tail_tokens < PAPERS_TAIL_TOKENS:
            key = (config.eval.tail_tokens, config.train.seq_len)
            shorter[key] = shorter.get(key, 0) + 1
    if not shorter:
        return ""
    parts = [f"the last {tail} tokens at training length {length} ({count} row(s))"
             for (tail, length), count in sorted(shorter.items())]
    return (f"The papers score the loss of the last {PAPERS_TAIL_TOKENS} tokens of every window; a scored tail "
            "must fit in the shortest window, the training length (dape_core's eval checks), so these rows "
            f"score a shorter one at every length instead: {'; '.join(parts)}. Their cells and the papers' values "
            "for those rows are not on the same tail.")

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

from ..study import Study
from ..study.published_checks import resolve_published


@dataclass
class PublishedLine:
    label: str  # the report row
    metric: str  # the results column (ppl_8192, ms_per_step, ...)
    published: float
    source: str
    mean: float  # measured: mean over the row's finished seeds (NaN: not measured yet)
    std: float
    seeds: int

    @property
    def difference(self) -> float:
        """Measured minus published."""
        return self.mean - self.published

    @property
    def ratio(self) -> float:
        return self.mean / self.published if self.published else math.nan

    def texts(self) -> list[str]:
        """The line's cells: row, metric, published, ours, difference (and ratio), seeds, source."""
        measured = "not measured yet" if not math.isfinite(self.mean) else (
            f"{self.mean:.3f}" + (f" ± {self.std:.3f}" if math.isfinite(self.std) else ""))
        difference = "–" if not math.isfinite(self.mean) else (
            f"{self.difference:+.3f}" + (f" (×{self.ratio:.2f})" if math.isfinite(self.ratio) else ""))
        return [self.label, _metric_words(self.metric), f"{self.published:g}", measured, difference, str(self.seeds),
                self.source]


HEADER = ["row", "metric", "published", "ours (mean ± std)", "ours − published (ours / published)", "n", "source"]
CAPTION = ("The papers' numbers for this profile (the study file's `published:` section, each with its source) "
           "beside the cells measured here: the mean ± std over the row's finished seeds, and the difference. The "
           "papers' values come from their own runs (their data order, seeds and code), so a difference of a few "
           "percent is within what a reproduction differs by; one of a different order is worth a look.")


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
        lines.append(PublishedLine(cell.label, cell.column, cell.value.value, cell.value.source,
                                   float(values.mean()) if len(values) else math.nan,
                                   float(values.std(ddof=1)) if len(values) > 1 else math.nan, len(values)))
    return lines

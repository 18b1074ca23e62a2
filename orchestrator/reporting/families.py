"""The metric families a report knows how to tabulate, found by column name so that new metrics
(ΔP, time cost, CHE accuracy) get their table as soon as trials log them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import pandas as pd

import dape_core.metric_names as names

from ..study.metric_families import ACCURACY, DELTA_P, METRIC_FAMILIES, PPL, SECONDS, TIME, MetricFamily, family_of
from .columns import metric_columns


@dataclass(frozen=True)
class Family:
    """How the report shows one metric family (study/metric_families.py declares the family itself: its name,
    label, column rule and direction)."""

    declared: MetricFamily
    key: str  # file and anchor names: table_<key>.csv
    description: str  # what a cell measures, for the caption
    header: Callable[[str], str]
    order: Callable[[str], tuple]
    decimals: int
    compare: str  # "ratio" (positive quantities) or "difference" (signed ones, accuracies)
    significance: bool
    by_length: bool = False  # columns are evaluation lengths: plotted against the length
    reference: Callable[[list[str]], str] = lambda columns: columns[-1]  # the ratio/Δ column's source
    # Why a column that is 0 in every run is 0 by definition ("{columns}": its headers): such a column is left
    # out of the table and its caption says why (ΔP at the training length). None: every column is shown.
    zero_reason: str | None = None

    @property
    def metric(self) -> str:
        """Its name as a study's report.metric (the headline table): ppl, delta_p, accuracy, time."""
        return self.declared.name

    @property
    def title(self) -> str:
        return self.declared.label

    @property
    def lower_is_better(self) -> bool:
        return self.declared.lower_is_better

    def match(self, column: str) -> bool:
        return self.declared.matches(column)

    def columns(self, frame: pd.DataFrame) -> list[str]:
        found = [c for c in metric_columns(frame) if self.match(c) and frame[c].notna().any()]
        return sorted(found, key=self.order)


_MS_FORWARD = names.per_length_pattern(names.MS_FORWARD)
_ACCURACY = re.compile("^(" + "|".join(names.ACCURACY_PREFIXES) + ")")


def _time_header(column: str) -> str:
    if column == names.MS_PER_STEP:
        return "ms/step"
    if match := _MS_FORWARD.match(column):
        return f"ms/fwd L={match.group(1)}"
    if column in SECONDS:
        return column.replace("_seconds", " s")
    return column.removeprefix(names.TIMING_PREFIX).replace("_", " ") + " ms"


def _time_order(column: str) -> tuple:
    if column == names.MS_PER_STEP:
        return (0, 0, column)
    if match := _MS_FORWARD.match(column):
        return (1, int(match.group(1)), column)
    if column.startswith(names.TIMING_PREFIX):
        return (2, 0, column)
    return (3, SECONDS.index(column) if column in SECONDS else 9, column)


def _time_reference(columns: list[str]) -> str:
    for preferred in (names.MS_PER_STEP, names.TRAIN_SECONDS):
        if preferred in columns:
            return preferred
    return columns[0]


def _accuracy_header(column: str) -> str:
    return _ACCURACY.sub("", column).replace("_", " ")


_SHOWN = {  # each declared family's presentation
    PPL.name: Family(PPL, "perplexity",
                     "Perplexity on the last K tokens of held-out windows of each evaluation length L. "
                     "Lower is better.",
                     header=lambda c: f"L={names.length_of(c, names.PPL)}",
                     order=lambda c: (names.length_of(c, names.PPL),),
                     decimals=3, compare="ratio", significance=True, by_length=True),
    DELTA_P.name: Family(DELTA_P, "delta_p",
                         "ΔP(L) = perplexity with the last T_train tokens as context minus perplexity with all "
                         "L tokens, on the same scored tail. Above 0: the model uses context beyond its training "
                         "length. Higher is better.",
                         header=lambda c: f"L={names.length_of(c, names.DELTA_P)}",
                         order=lambda c: (names.length_of(c, names.DELTA_P),),
                         decimals=3, compare="difference", significance=True, by_length=True,
                         zero_reason="{columns} left out: ΔP is 0 there by definition (at an evaluation length up to "
                                     "the training length, the last T_train tokens are the whole context)."),
    ACCURACY.name: Family(ACCURACY, "accuracy",
                          "Per-token accuracy (averaged over the test lengths where the task has several). "
                          "Higher is better.",
                          header=_accuracy_header, order=lambda c: (c,), decimals=3, compare="difference",
                          significance=True),
    TIME.name: Family(TIME, "time",
                      "Milliseconds per training step and per forward pass (median after warm-up) where measured, and "
                      "wall-clock seconds of training and evaluation. Lower is better; hardware as in the device "
                      "column of the trials table.",
                      header=_time_header, order=_time_order, decimals=2, compare="ratio", significance=False,
                      reference=_time_reference),
}
FAMILIES = tuple(_SHOWN[family.name] for family in METRIC_FAMILIES)  # in the declared order


def headline_first(metric: str) -> list[Family]:
    """The families in report order: the study's headline (report.metric) first, the others as listed."""
    return sorted(FAMILIES, key=lambda family: family.metric != metric)


def higher_is_better(column: str) -> bool:
    family = family_of(column)
    return family is not None and not family.lower_is_better

"""The metric families, declared once: a family's name (as a study's `report.metric`), its label, which metric
columns belong to it, and whether lower is better. The study's checks (search_checks.py: a report.metric the
trials can fill) and the report (reporting/families.py: one table per family, with how it is shown) both read
these, and `ReportMetric`, the type of report.metric, is derived from them.

They sit here, on the study's floor, because the study is the lowest floor that needs them and the report is
above it; the metric names they group stay in dape_core/metric_names.py. A new family is one record below
(with its table's presentation in reporting/families.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import dape_core.metric_names as names


@dataclass(frozen=True)
class MetricFamily:
    name: str  # as a study's report.metric names it
    label: str  # the title of its table in the report
    matches: Callable[[str], bool]  # the column rule: whether a metric column belongs to the family
    lower_is_better: bool


_PPL, _DELTA_P = names.per_length_pattern(names.PPL), names.per_length_pattern(names.DELTA_P)
_ACCURACY = re.compile("^(" + "|".join(names.ACCURACY_PREFIXES) + ")")
SECONDS = (names.TRAIN_SECONDS, names.EVAL_SECONDS)  # the wall-clock times in the time family

PPL = MetricFamily("ppl", "Perplexity by evaluation length", lambda column: bool(_PPL.match(column)), True)
DELTA_P = MetricFamily("delta_p", "ΔP (information gain) by evaluation length",
                       lambda column: bool(_DELTA_P.match(column)), False)
ACCURACY = MetricFamily("accuracy", "Accuracy", lambda column: bool(_ACCURACY.match(column)), False)
TIME = MetricFamily("time", "Time cost", lambda column: column.startswith(names.TIMING_PREFIX) or column in SECONDS,
                    True)

METRIC_FAMILIES: tuple[MetricFamily, ...] = (PPL, DELTA_P, ACCURACY, TIME)  # the report's order
BY_NAME = {family.name: family for family in METRIC_FAMILIES}

# report.metric's type, from the records (a type checker reads it as str; pydantic and the JSON Schema see the names).
if TYPE_CHECKING:
    ReportMetric = str
else:
    ReportMetric = Literal[tuple(family.name for family in METRIC_FAMILIES)]


def family_of(column: str) -> MetricFamily | None:
    """The family a metric column belongs to, or None (a loss, a count, ...)."""
    return next((family for family in METRIC_FAMILIES if family.matches(column)), None)

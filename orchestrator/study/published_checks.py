"""The published values of a profile (`published: {paper: [...]}`) resolved against that profile's rows, as a
claim is (claim_checks.py): each must name a row (variant, where), a metric the row logs and, for a per-length
metric, a length it is evaluated at. The same resolution finds the results column the report puts the value
beside (reporting/published.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .claim_checks import metric_column, select, study_rows

if TYPE_CHECKING:
    from .model import PublishedValue, Study


@dataclass(frozen=True)
class PublishedCell:
    """A published value and the measured cell it stands beside: a row's label and a results column."""

    value: "PublishedValue"
    label: str
    column: str


def resolve_published(study: "Study", profile: str) -> tuple[list[PublishedCell], list[str]]:
    """(the cells of the profile's published values, the problems, each with its field path)."""
    values = study.published.get(profile, [])
    if not values:
        return [], []
    try:
        rows = study_rows(study)
    except Exception:  # the rows' own problems are reported by the trial validation
        return [], []
    cells, problems = [], []
    for index, value in enumerate(values):
        path = f"published.{profile}[{index}]"
        try:
            chosen = select(study, rows, value.variant, value.where)
        except ValueError as error:
            field = "where" if str(error).startswith("where:") else "variant"
            problems.append(f"{path}.{field}: {str(error).removeprefix('where: ')}")
            continue
        if len(chosen) > 1:
            problems.append(f"{path}.where: {value.variant!r} names {len(chosen)} rows "
                            f"({', '.join(row.label for row in chosen[:4])}{' ...' if len(chosen) > 4 else ''}); "
                            "give the grid point in 'where' so that the value stands beside one cell")
            continue
        try:
            column = metric_column(chosen[0], value.metric, value.length)
        except ValueError as error:
            text = str(error).replace("'at'", "'length'").replace("drop 'at'", "drop 'length'")
            field = "metric" if text.startswith("unknown metric") else "length"
            problems.append(f"{path}.{field}: {text}")
            continue
        cells.append(PublishedCell(value, chosen[0].label, column))
    return cells, problems

"""A study's rows (cells): each variant, or the base alone, crossed with the swept points of its axes and
zipped keys, minus the excluded assignments. Seeds repeat every row (trial/trials.py)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class RowVariant(Protocol):
    """What the rows read of a variant (model.py's `Variant`)."""

    label: str
    set: dict
    baseline: bool


class _Baseline(Protocol):
    baseline: str | None


class RowSource(Protocol):
    """What the rows read of a study (model.py's `Study`, which imports this module to expand itself)."""

    variants: Any
    axes: dict
    zip: dict
    exclude: Any
    one_at_a_time: bool

    @property
    def report(self) -> _Baseline: ...


@dataclass(frozen=True)
class Cell:
    """One report row: a label and the overrides that make its config (seeds repeat it)."""

    label: str
    variant: str
    overrides: dict
    baseline: bool
    where: str  # how validation messages name this cell
    swept: dict  # the axis/zip values of this row (for tags and swept-value plots)


def swept_points(study: RowSource) -> list[dict[str, Any]]:
    """Swept assignments: the axes grid (or one-at-a-time) crossed with the zipped rows, minus excludes."""
    zipped = [dict(zip(study.zip, values)) for values in zip(*study.zip.values())] if study.zip else [{}]
    if study.one_at_a_time:
        # The first value of each axis is its baseline value; each other value is varied alone.
        first = {key: values[0] for key, values in study.axes.items()}
        grid = [first] + [{**first, key: value} for key, values in study.axes.items() for value in values[1:]]
    else:
        grid = [dict(zip(study.axes, values)) for values in itertools.product(*study.axes.values())]
    points = [{**g, **z} for g in grid for z in zipped]
    return [p for p in points if not any(all(p.get(k) == v for k, v in ex.items()) for ex in study.exclude)]


def study_cells(study: RowSource, variants: Sequence[RowVariant]) -> list[Cell]:
    """`variants`: the study's, or one standing for the base alone when it declares none."""
    points = swept_points(study)
    rows = []
    for index, variant in enumerate(variants):
        for number, point in enumerate(points):
            suffix = ", ".join(f"{key.split('.')[-1]}={value}" for key, value in point.items())
            label = f"{variant.label} ({suffix})" if suffix and study.variants else (suffix or variant.label)
            parts = [f"variants[{index}] ({variant.label})"] if study.variants else []
            parts += [f"{'zip' if key in study.zip else 'axes'}.{key}={value!r}" for key, value in point.items()]
            rows.append((variant, number, point, label, " with ".join(parts) or "base"))
    labels = {label for _, _, _, label, _ in rows}
    return [Cell(label=label, variant=variant.label, overrides={**variant.set, **point},
                 baseline=_is_baseline(study, variant, number, label, labels), where=where, swept=dict(point))
            for variant, number, point, label, where in rows]


def _is_baseline(study: RowSource, variant: RowVariant, number: int, label: str, labels: set[str]) -> bool:
    """A baseline row (see `comparisons`). `report.baseline` names a row, or a variant (its row at every
    swept point); without it, the variant marked `baseline: true`, at every swept point; without variants,
    the one-at-a-time centre point (a plain grid has no natural baseline)."""
    reference = study.report.baseline
    if reference is not None:
        return label == reference if reference in labels else variant.label == reference
    return variant.baseline if study.variants else number == 0 and study.one_at_a_time


def comparisons(cells: list[Cell]) -> dict[str, str | None]:
    """Each row's baseline row: the baseline row at the same swept point (a grid's rows are compared within
    their grid point), else the only baseline row; None for baseline rows and where there is none."""
    baselines = [cell for cell in cells if cell.baseline]
    by_point = {_point(cell): cell.label for cell in baselines}
    only = baselines[0].label if len(baselines) == 1 else None
    return {cell.label: None if cell.baseline else by_point.get(_point(cell), only) for cell in cells}


def _point(cell: Cell) -> tuple:
    return tuple(sorted((key, repr(value)) for key, value in cell.swept.items()))

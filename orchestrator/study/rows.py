"""A study's rows (cells): each variant, or the base alone, crossed with the swept points of its axes and
zipped keys, minus the excluded assignments. Seeds repeat every row (planning.trials)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .model import Study, Variant


@dataclass(frozen=True)
class Cell:
    """One report row: a label and the overrides that make its config (seeds repeat it)."""

    label: str
    variant: str
    overrides: dict
    baseline: bool
    where: str  # how validation messages name this cell
    swept: dict  # the axis/zip values of this row (for tags and swept-value plots)


def swept_points(study: "Study") -> list[dict[str, Any]]:
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


def study_cells(study: "Study", variants: list["Variant"]) -> list[Cell]:
    """`variants`: the study's, or one standing for the base alone when it declares none."""
    points = swept_points(study)
    cells = []
    for index, variant in enumerate(variants):
        for number, point in enumerate(points):
            suffix = ", ".join(f"{key.split('.')[-1]}={value}" for key, value in point.items())
            label = f"{variant.label} ({suffix})" if suffix and study.variants else (suffix or variant.label)
            parts = [f"variants[{index}] ({variant.label})"] if study.variants else []
            parts += [f"{'zip' if key in study.zip else 'axes'}.{key}={value!r}" for key, value in point.items()]
            # The baseline row: the baseline variant at its first swept point; without variants, the
            # one-at-a-time centre point (a plain grid has no natural baseline).
            baseline = number == 0 and (variant.baseline if study.variants else study.one_at_a_time)
            cells.append(Cell(label=label, variant=variant.label, overrides={**variant.set, **point},
                              baseline=baseline, where=" with ".join(parts) or "base", swept=dict(point)))
    return cells

"""How a study's rows are laid out in its report: their order, their block and the row each is compared with.

A study whose variants are crossed with a grid (axes or zipped keys: `position_encoding.yaml`'s 8 encodings
x plain / DAPE / DAPE 1x3) reads like the papers' main table: one block per grid point, the variants inside
it, every row compared with the baseline of its own grid point. Other studies keep their rows in the study
file's order, compared with the study's baseline row.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..study import Study
from ..study.rows import swept_points


@dataclass(frozen=True)
class RowPlace:
    order: int  # position in the tables
    block: str  # the grid point, e.g. "pos_encoding=rope"; "" when the study has no blocks
    compare_with: str | None  # the baseline row's label; None for baseline rows and without a baseline
    is_baseline: bool


def point_text(point: dict) -> str:
    return ", ".join(f"{key.split('.')[-1]}={value}" for key, value in point.items())


def has_blocks(study: Study) -> bool:
    return bool(study.variants) and len(swept_points(study)) > 1


def row_layout(study: Study) -> dict[str, RowPlace]:
    cells = study.cells()
    compare_with = study.comparisons()
    if not has_blocks(study):
        return {cell.label: RowPlace(number, "", compare_with[cell.label], cell.baseline)
                for number, cell in enumerate(cells)}
    points = [point_text(point) for point in swept_points(study)]
    variants = [variant.label for variant in study.variants]
    places = {}
    for cell in cells:
        block = point_text(cell.swept)
        order = points.index(block) * len(variants) + variants.index(cell.variant)
        places[cell.label] = RowPlace(order, block, compare_with[cell.label], cell.baseline)
    return places

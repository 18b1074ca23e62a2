"""The Pareto front of points in several objectives, each minimised or maximised: the points no other point
dominates (at least as good in every objective and better in one). The report's cost front (cost_front.py)
and a multi-objective search's Pareto set (search.py) both read it, so "on the front" means one thing."""

from __future__ import annotations

import math
from collections.abc import Sequence


def dominates(a: Sequence[float], b: Sequence[float], modes: Sequence[str]) -> bool:
    """Whether `a` dominates `b`: no worse in any objective and better in at least one (`modes`: min/max)."""
    better = False
    for x, y, mode in zip(a, b, modes):
        if mode == "max":
            x, y = -x, -y
        if x > y:
            return False
        better = better or x < y
    return better


def pareto_mask(points: Sequence[Sequence[float]], modes: Sequence[str]) -> list[bool]:
    """For each point, whether it is on the front. A point with a missing (NaN) objective is never on it and
    dominates nothing; equal points are all on the front (none dominates the other)."""
    complete = [all(isinstance(v, (int, float)) and math.isfinite(v) for v in point) for point in points]
    mask = []
    for index, point in enumerate(points):
        if not complete[index]:
            mask.append(False)
            continue
        mask.append(not any(complete[other] and dominates(points[other], point, modes)
                            for other in range(len(points)) if other != index))
    return mask

"""Every trial a study can run, resolved and validated by dape_core before anything starts.

A row's config is `base` plus the row's overrides (variant, axis/zip point); a sampling search adds every
value of each `choice` and both bounds of each range, each on top of every row, so that a value that only
a later sample would draw is refused now rather than mid-study. Then the rows are checked together: two
rows with one resolved config would train one model into one MLflow run (an error naming both), and each
trial's MLflow run name must fit MLflow's limit.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from dape_core import ExperimentConfig

from .model import MAX_RUN_NAME
from .overrides import resolve
from .problems import format_pydantic

if TYPE_CHECKING:
    from .model import Distribution, Study
    from .rows import Cell

MAX_ROWS = 5_000  # rows before seeds; a grid beyond this is a typo, not a study


@dataclass(frozen=True)
class ResolvedTrial:
    """A validated trial config and how messages name it; `cell` is None for a search value's config."""

    where: str
    config: ExperimentConfig
    cell: "Cell | None"
    row: int = 0  # 1-based row number in the report's order (0 for a search value's config)


def validate_config(config: dict, where: str) -> tuple[ExperimentConfig | None, list[str]]:
    try:
        return ExperimentConfig(**config), []
    except ValidationError as error:
        return None, format_pydantic(error, where, ExperimentConfig)
    except TypeError as error:  # a section that is not a mapping
        return None, [f"{where}: {error}"]


def row_count(study: "Study") -> int:
    """The rows the study expands to (before excludes and seeds), computed without expanding them."""
    sizes = [len(values) for values in study.axes.values()]
    grid = 1 + sum(size - 1 for size in sizes) if study.one_at_a_time else math.prod(sizes)
    zipped = len(next(iter(study.zip.values()))) if study.zip else 1
    return grid * zipped * max(1, len(study.variants))


def resolved_trials(study: "Study") -> tuple[list[ResolvedTrial], list[str]]:
    """(every valid resolved trial, the problems of the others). Stops at `base` when base itself is invalid,
    so that its problem is reported once rather than once per row."""
    count = row_count(study)
    if count > MAX_ROWS:
        return [], [f"axes/zip/variants: the study expands to {count} rows (before seeds), more than {MAX_ROWS}; "
                    "sweep fewer values, or split it into several studies"]
    _, problems = validate_config(study.base, "base")
    if problems:
        return [], problems
    trials: list[ResolvedTrial] = []
    for row, cell in enumerate(study.cells(), 1):
        found = _add(trials, cell.where, study.base, cell.overrides, cell, row)
        problems += [p for p in found if p not in problems]
    failed_values: set[tuple[str, str]] = set()  # a search value is reported at the first row it fails
    for cell in study.cells():
        for key, dist in study.search.space.items():
            for value in search_values(dist):
                if (key, repr(value)) in failed_values:
                    continue
                prefix = f"{cell.where} with " if study.variants or study.axes or study.zip else ""
                found = _add(trials, f"{prefix}search.space.{key}={value!r}", study.base,
                             {**cell.overrides, key: value}, None)
                if found:
                    failed_values.add((key, repr(value)))
                    problems += found
    if not study.cells():
        problems.append("exclude: every combination is excluded; nothing would run")
    return trials, problems


def _add(trials: list[ResolvedTrial], where: str, base: dict, overrides: dict[str, Any], cell, row: int = 0) -> list[str]:
    try:
        config = resolve(base, overrides)
    except ValueError as error:
        return [f"{where}: {error}"]
    validated, problems = validate_config(config, where)
    if validated is not None:
        trials.append(ResolvedTrial(where, validated, cell, row))
    return problems


def search_values(dist: "Distribution") -> list[Any]:
    """The values a search dimension can take that bound what a trial may be given: every choice, both ends
    of a range (an `int` range's ends as integers)."""
    if dist.type == "choice":
        return list(dist.values)
    if dist.type == "int":
        return [int(dist.low), int(dist.high)]
    return [dist.low, dist.high]


def identity_problems(trials: list[ResolvedTrial]) -> list[str]:
    """Two rows whose resolved configs are equal would be one trial identity: one MLflow run, one checkpoint."""
    first: dict[str, ResolvedTrial] = {}
    problems = []
    for trial in trials:
        if trial.cell is None:
            continue
        canonical = json.dumps(trial.config.to_dict(), sort_keys=True, default=str)
        if canonical in first:
            earlier = first[canonical]
            problems.append(f"{earlier.where} (row {earlier.row}) and {trial.where} (row {trial.row}): the two rows "
                            "resolve to the same trial config, so they would train one model into one MLflow run "
                            "and one checkpoint; make them differ or keep one")
        else:
            first[canonical] = trial
    return problems


def run_name_problems(study: "Study") -> list[str]:
    """A trial's MLflow run is named "<label> · s<seed>"; swept values lengthen the label."""
    longest_seed = max(study.seeds, key=lambda seed: len(str(seed)))
    problems = []
    for cell in study.cells():
        name = f"{cell.label} · s{longest_seed}"
        if len(name) > MAX_RUN_NAME:
            problems.append(f"{cell.where}: the run name {name[:40]!r}... has {len(name)} characters, more than "
                            f"MLflow's {MAX_RUN_NAME}; shorten the row's label (the variant's label and the swept values; "
                            "without variants, the study's name)")
    return problems

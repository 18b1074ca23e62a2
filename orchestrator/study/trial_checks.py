"""Every trial a study can run, resolved and validated by dape_core before anything starts.

A row's config is `base` plus the row's overrides (variant, axis/zip point); a sampling search adds every
value of each `choice` and both bounds of each range, each on top of every row, so that a value that only
a later sample would draw is refused now rather than mid-study. Then the rows are checked together: two
rows with one resolved config would train one model into one MLflow run (an error naming both), and each
trial's MLflow run name must fit MLflow's limit.

Every config is checked with its trial size (`Study.trial_config`: the row's own `distributed` section, else
`resources.workers` / `resources.parallelism`), so that a size dape_core refuses (a batch that does not split
over the workers, a CHE trial on several) is reported, saying where the size came from; and a multi-worker
trial needs whole GPUs per worker. The size is not part of a trial's identity (the same computation on any
number of workers), so two rows that differ only in it are one trial. Rows of one variant that differ only in
settings the trial does not read share one trial (`identity_problems`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from dape_core import ExperimentConfig

from .identity import legacy_identity, trial_identity
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
    """(every valid resolved trial, the problems of the others). Where `base` itself is invalid its problems
    are reported once, not again for each row that inherits them, and each row's own problems with them (a typo
    in base and one in a variant's `set:` in one report); no trial is then valid (every row is built on base)."""
    count = row_count(study)
    if count > MAX_ROWS:
        return [], [f"axes/zip/variants: the study expands to {count} rows (before seeds), more than {MAX_ROWS}; "
                    "sweep fewer values, or split it into several studies"]
    problems = _add([], "base", study, {}, None)
    inherited = {_field_and_message(problem, "base") for problem in problems}  # base's, as a row would say them
    trials: list[ResolvedTrial] = []
    for row, cell in enumerate(study.cells(), 1):
        found = _add(trials, cell.where, study, cell.overrides, cell, row)
        problems += [p for p in found if p not in problems and _field_and_message(p, cell.where) not in inherited]
    if inherited:
        return [], problems
    failed_values: set[tuple[str, str]] = set()  # a search value is reported at the first row it fails
    for cell in study.cells():
        for key, dist in study.search.space.items():
            for value in search_values(dist):
                if (key, repr(value)) in failed_values:
                    continue
                prefix = f"{cell.where} with " if study.variants or study.axes or study.zip else ""
                found = _add(trials, f"{prefix}search.space.{key}={value!r}", study,
                             {**cell.overrides, key: value}, None)
                if found:
                    failed_values.add((key, repr(value)))
                    problems += found
    if not study.cells():
        problems.append("exclude: every combination is excluded; nothing would run")
    return trials, problems


def _field_and_message(problem: str, where: str) -> str:
    """A problem without the name of the config it was found in (format_pydantic: `base.<path>: ...` for base,
    `<where>: <path>: ...` for a row): the same field's same problem in base and in a row read alike."""
    if where == "base" and problem.startswith("base."):
        return problem.removeprefix("base.")
    return problem.removeprefix(f"{where}: ")


def resolved_rows(study: "Study") -> list[ResolvedTrial]:
    """Each row's validated config (before seeds), in report order: those the validation resolved (load.py
    keeps them on the study it returns), else resolved now and kept; ValueError listing the problems of a
    study whose rows are invalid (one that did not come through `load_study`/`parse_study`)."""
    if study._rows is None:
        rows: list[ResolvedTrial] = []
        problems = []
        for row, cell in enumerate(study.cells(), 1):
            problems += _add(rows, cell.where, study, cell.overrides, cell, row)
        if problems:
            raise ValueError("; ".join(problems))
        study._rows = tuple(rows)
    return list(study._rows)


def _add(trials: list[ResolvedTrial], where: str, study: "Study", overrides: dict[str, Any], cell,
         row: int = 0) -> list[str]:
    """Validate one resolved trial config (with its trial size); keep it in `trials` when it is valid."""
    try:
        own = resolve(study.base, overrides)
    except ValueError as error:
        return [f"{where}: {error}"]
    validated, problems = validate_config(study.resources.trial_size(own), where)
    if validated is not None:
        problems = size_problems(study, validated, where)
        if not problems:
            trials.append(ResolvedTrial(where, validated, cell, row))
    if not isinstance(own.get("distributed"), dict):  # the size came from `resources`: name it there
        problems = [f"{p} (distributed.* comes from resources.workers / resources.parallelism)"
                    if "distributed." in p else p for p in problems]
    return problems


def size_problems(study: "Study", config: ExperimentConfig, where: str) -> list[str]:
    """What `resources` cannot give a trial of this size: a multi-worker trial's workers each drive their own
    GPU(s), so they cannot share one."""
    gpus, workers = study.resources.gpus, config.distributed.workers
    if workers > 1 and gpus != int(gpus):
        return [f"{where}: distributed.workers={workers} needs whole GPUs per worker, got resources.gpus={gpus:g}: "
                "each worker of a multi-worker trial drives its own GPU(s)"]
    return []


def search_values(dist: "Distribution") -> list[Any]:
    """The values a search dimension can take that bound what a trial may be given: every choice, both ends
    of a range (an `int` range's ends as integers)."""
    if dist.type == "choice":
        assert dist.values is not None, "a choice has its values (Distribution's validation)"
        return list(dist.values)
    assert dist.low is not None and dist.high is not None, "a range has its bounds (Distribution's validation)"
    if dist.type == "int":
        return [int(dist.low), int(dist.high)]
    return [dist.low, dist.high]


def identity_problems(trials: list[ResolvedTrial]) -> list[str]:
    """Two rows whose effective configs are equal would be one trial identity: one MLflow run, one checkpoint.
    The identity leaves out the trial size and the settings a trial does not read (study/
    identity.py). Rows of one variant that differ only in settings it ignores (the Kerple baseline at
    every `model.d_dape` of a grid) are meant to be one trial: they share its run. Any other pair is an
    error: two variants that resolve to one trial, or two rows that differ in nothing but their size."""
    first: dict[str, ResolvedTrial] = {}
    problems = []
    for trial in trials:
        if trial.cell is None:
            continue
        config = trial.config.to_dict()
        canonical = trial_identity(config)
        if canonical not in first:
            first[canonical] = trial
            continue
        earlier = first[canonical]
        assert earlier.cell is not None  # `first` keeps rows only (those with a cell)
        same_config = legacy_identity(earlier.config.to_dict()) == legacy_identity(config)
        if not same_config and earlier.cell.variant == trial.cell.variant:
            continue  # one variant's rows that differ only in what it does not read: one shared trial
        size_only = same_config and earlier.config.distributed != trial.config.distributed
        apart = (" apart from their trial size (distributed.*: the number of workers does not change what a "
                 "trial computes)" if size_only else "")
        if not same_config:
            apart = " apart from settings neither reads (logged as n/a)"
        differ = "make them differ in model, data, train or eval" if size_only else "make them differ"
        problems.append(f"{earlier.where} (row {earlier.row}) and {trial.where} (row {trial.row}): the two rows "
                        f"resolve to the same trial config{apart}, so they would train one model into one MLflow "
                        f"run and one checkpoint; {differ} or keep one")
    return problems


def run_name_problems(study: "Study") -> list[str]:
    """A trial's MLflow run is named "<label> · s<seed>"; swept values lengthen the label."""
    longest_seed = max(study.seeds, key=lambda seed: len(str(seed)))
    problems = []
    for cell in study.cells():
        name = f"{cell.label} · s{longest_seed}"
        if len(name) > MAX_RUN_NAME:
            problems.append(f"{cell.where}: the run name {name[:40]!r}... has {len(name)} characters, more than "
                            f"MLflow's {MAX_RUN_NAME}; shorten the row's label (the variant's label and the swept "
                            "values; without variants, the study's name)")
    return problems

"""The study file: YAML read with `safe_load`, validated by pydantic, every problem reported at once.

A study is a `base` trial config (the model/data/train/eval sections of `dape_core.ExperimentConfig`),
optional grid `axes` over dotted keys, optional named `variants` (a label plus dotted overrides), and
`seeds`. Every resolved trial config is validated too, so a bad value in a variant is reported with the
variant's name and the field path before anything is launched.
"""

from __future__ import annotations

import copy
import dataclasses
import typing
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dape_core import ExperimentConfig


class StudyError(ValueError):
    """A study file that cannot run. `problems` lists one message per field, each naming its path."""

    def __init__(self, source: str, problems: list[str]):
        self.source, self.problems = source, problems
        lines = "\n".join(f"  - {problem}" for problem in problems)
        super().__init__(f"{source}: {len(problems)} problem(s) in the study file:\n{lines}")


@dataclass(frozen=True)
class Cell:
    """One report row: a label and the overrides that make its config (seeds repeat it)."""

    label: str
    variant: str
    overrides: dict
    baseline: bool
    where: str  # how validation messages name this cell


class Variant(BaseModel):
    model_config = ConfigDict(extra="forbid")
    label: str = Field(min_length=1, description="Row name in the report, e.g. 'DAPE1x3-Kerple'.")
    baseline: bool = Field(False, description="The variant other rows are compared against.")
    set: dict[str, Any] = Field(default_factory=dict, description="Dotted-key overrides of `base`.")


class Resources(BaseModel):
    model_config = ConfigDict(extra="forbid")
    cpus: float = Field(1.0, gt=0, description="CPUs per trial (also the trial's torch threads).")
    gpus: float = Field(0.0, ge=0, description="GPUs per trial; fractions share a GPU.")
    max_concurrent: int | None = Field(None, ge=1, description="At most this many trials at once.")
    max_retries: int = Field(1, ge=0, description="Times a crashed trial is retried.")


class ReportSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    metric: str = Field("ppl", description="Metric family shown in the table cells.")


class Study(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="Experiment name in MLflow.")
    description: str = ""
    base: dict[str, Any] = Field(default_factory=dict, description="Shared trial config: model, data, train, eval.")
    axes: dict[str, list[Any]] = Field(default_factory=dict, description="Grid over dotted keys.")
    variants: list[Variant] = Field(default_factory=list)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    resources: Resources = Field(default_factory=Resources)
    report: ReportSpec = Field(default_factory=ReportSpec)

    @field_validator("axes")
    @classmethod
    def _non_empty_axes(cls, axes: dict[str, list[Any]]) -> dict[str, list[Any]]:
        empty = [key for key, values in axes.items() if not values]
        if empty:
            raise ValueError(f"axis {empty[0]!r} has no values; give at least one or remove the axis")
        return axes

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, seeds: list[int]) -> list[int]:
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds repeat ({seeds}); each seed runs once")
        return seeds

    @model_validator(mode="after")
    def _labels(self) -> "Study":
        labels = [variant.label for variant in self.variants]
        duplicates = sorted({label for label in labels if labels.count(label) > 1})
        if duplicates:
            raise ValueError(f"variants: duplicate label(s) {duplicates}; each row of the report needs its own name")
        if sum(variant.baseline for variant in self.variants) > 1:
            raise ValueError("variants: more than one variant is marked baseline: true; mark exactly one")
        return self

    def cells(self) -> list["Cell"]:
        """The study's rows before seeds: each variant (or the base alone) crossed with the axes grid."""
        variants = self.variants or [Variant(label=self.name, baseline=True)]
        grid = [dict(zip(self.axes, values)) for values in itertools.product(*self.axes.values())]
        cells = []
        for index, variant in enumerate(variants):
            for point in grid:
                overrides = {**variant.set, **point}
                suffix = ", ".join(f"{key.split('.')[-1]}={value}" for key, value in point.items())
                label = f"{variant.label} ({suffix})" if suffix and self.variants else (suffix or variant.label)
                parts = [f"variants[{index}] ({variant.label})"] if self.variants else []
                parts += [f"axes.{key}={value!r}" for key, value in point.items()]
                where = " with ".join(parts) or "base"
                cells.append(Cell(label=label, variant=variant.label, overrides=overrides,
                                  baseline=variant.baseline, where=where))
        return cells

    @property
    def baseline_label(self) -> str | None:
        marked = [variant.label for variant in self.variants if variant.baseline]
        return marked[0] if marked else None


def set_dotted(config: dict, dotted_key: str, value: Any) -> None:
    *parents, leaf = dotted_key.split(".")
    node = config
    for key in parents:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ValueError(f"{dotted_key!r}: {key!r} is not a section")
    node[leaf] = value


def resolve(base: dict, overrides: dict[str, Any]) -> dict:
    config = copy.deepcopy(base)
    for key, value in overrides.items():
        set_dotted(config, key, value)
    return config


def _fields_at(root: type, loc: tuple) -> list[str]:
    """Field names of the (data)class reached by following `loc` from `root`, for "valid keys" hints."""
    node = root
    for part in loc:
        hints = typing.get_type_hints(node) if isinstance(node, type) else {}
        node = hints.get(part)
        if node is None:
            return []
    if isinstance(node, type) and issubclass(node, BaseModel):
        return list(node.model_fields)
    if dataclasses.is_dataclass(node):
        return [f.name for f in dataclasses.fields(node)]
    return []


def _format_pydantic(error: ValidationError, prefix: str, root: type) -> list[str]:
    problems = []
    for item in error.errors():
        loc = tuple(item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
            valid = _fields_at(root, loc[:-1])
            message = f"unknown key {loc[-1]!r}" + (f"; valid keys: {', '.join(valid)}" if valid else "")
        path = ".".join(str(part) for part in loc)
        if prefix in ("base", "study"):
            problems.append(f"{prefix}.{path}: {message}" if path else f"{prefix}: {message}")
        else:
            problems.append(f"{prefix}: {path}: {message}" if path else f"{prefix}: {message}")
    return problems


def validate_config(config: dict, where: str) -> tuple[ExperimentConfig | None, list[str]]:
    try:
        return ExperimentConfig(**config), []
    except ValidationError as error:
        return None, _format_pydantic(error, where, ExperimentConfig)
    except TypeError as error:  # a section that is not a mapping
        return None, [f"{where}: {error}"]


def parse_study(raw: Any, source: str = "<study>") -> Study:
    """Validate a loaded YAML document into a Study, or raise StudyError listing every problem."""
    if not isinstance(raw, dict):
        raise StudyError(source, [f"(top level): expected a mapping of study fields, got {type(raw).__name__}"])
    try:
        study = Study.model_validate(raw)
    except ValidationError as error:
        raise StudyError(source, _format_pydantic(error, "study", Study)) from None
    problems: list[str] = []
    _, base_problems = validate_config(study.base, "base")
    problems += base_problems
    if not base_problems:
        for cell in study.cells():
            try:
                config = resolve(study.base, cell.overrides)
            except ValueError as error:
                problems.append(f"{cell.where}: {error}")
                continue
            _, found = validate_config(config, cell.where)
            problems += [p for p in found if p not in problems]
    if problems:
        raise StudyError(source, problems)
    return study


def load_study(path: str | Path) -> Study:
    path = Path(path)
    if not path.is_file():
        raise StudyError(str(path), ["(file): no such study file"])
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        hint = " (tags that construct Python objects are refused: plain YAML only)" if "python/" in str(error) else ""
        raise StudyError(str(path), [f"(YAML): not valid YAML{hint}: {error}"]) from None
    return parse_study(raw, str(path))

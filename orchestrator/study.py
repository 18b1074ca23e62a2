"""The study file: YAML read with `safe_load`, validated by pydantic, every problem reported at once.

A study is a `base` trial config (the model/data/train/eval sections of `dape_core.ExperimentConfig`) and
the ways it is varied:
- `axes`: a grid over dotted keys (`model.kernel_size: [1, 3, 5]`), or, with `one_at_a_time: true`, each
  axis varied alone from the baseline's values while the others stay put;
- `zip`: dotted keys whose value lists vary together (kernel size with a cost-matched D_dape);
- `exclude`: partial assignments whose combinations are dropped;
- `variants`: named rows (a label plus dotted overrides), one of which may be the baseline;
- `seeds`: repeats of every row;
- `search`: grid (the default: the rows above), random or Optuna TPE over declared distributions;
- `profiles`: named dotted overrides of the study itself (`base.train.steps: 50000`, `resources.gpus: 1`).
Every resolved trial config is validated too, so a bad value in a variant is reported with the variant's
name and the field path before anything is launched.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dape_core import ExperimentConfig

SECTIONS = ("model", "data", "train", "eval", "che")  # ExperimentConfig's sections


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
    swept: dict  # the axis/zip values of this row (for tags and swept-value plots)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Variant(_Strict):
    label: str = Field(min_length=1, description="Row name in the report, e.g. 'DAPE1x3-Kerple'.")
    baseline: bool = Field(False, description="The variant other rows are compared against.")
    set: dict[str, Any] = Field(default_factory=dict, description="Dotted-key overrides of `base`.")


class Resources(_Strict):
    cpus: float = Field(1.0, gt=0, description="CPUs per trial (also the trial's torch threads).")
    gpus: float = Field(0.0, ge=0, description="GPUs per trial; fractions share a GPU.")
    max_concurrent: int | None = Field(None, ge=1, description="At most this many trials at once.")
    max_retries: int = Field(1, ge=0, description="Times a crashed trial is retried.")
    gpu_memory_gb: float | None = Field(None, gt=0, description="Device memory per GPU, for `plan`'s fit check.")


class Distribution(_Strict):
    """A search dimension: `choice` (values), `uniform`/`loguniform` (low, high), `int` (low, high)."""

    type: Literal["choice", "uniform", "loguniform", "int"]
    values: list[Any] | None = None
    low: float | None = None
    high: float | None = None

    @model_validator(mode="after")
    def _complete(self) -> "Distribution":
        if self.type == "choice":
            if not self.values:
                raise ValueError("a 'choice' distribution needs a non-empty 'values' list")
        else:
            if self.low is None or self.high is None:
                raise ValueError(f"a {self.type!r} distribution needs 'low' and 'high'")
            if not self.low < self.high:
                raise ValueError(f"'low' ({self.low}) must be below 'high' ({self.high})")
            if self.type == "loguniform" and self.low <= 0:
                raise ValueError("a 'loguniform' distribution needs low > 0")
        return self


class Search(_Strict):
    algorithm: Literal["grid", "random", "optuna"] = "grid"
    num_samples: int = Field(1, ge=1, description="Configurations sampled (random/optuna).")
    metric: str = Field("val_loss", description="Metric the searcher and scheduler optimise.")
    mode: Literal["min", "max"] = "min"
    space: dict[str, Distribution] = Field(default_factory=dict, description="Dotted key -> distribution.")
    seed: int = 0

    @model_validator(mode="after")
    def _space_for_samplers(self) -> "Search":
        if self.algorithm != "grid" and not self.space:
            raise ValueError(f"search.algorithm {self.algorithm!r} needs a 'space' of distributions")
        if self.algorithm == "grid" and self.space:
            raise ValueError("search.space is for random/optuna; a grid is declared with 'axes'")
        return self


class Scheduler(_Strict):
    type: Literal["none", "asha"] = "none"
    metric: str | None = Field(None, description="Defaults to search.metric.")
    grace_period: int = Field(100, ge=1, description="Steps every trial runs before it may be stopped.")
    reduction_factor: float = Field(3, gt=1)


class ReportSpec(_Strict):
    metric: str = Field("ppl", description="Metric family shown in the table cells.")
    baseline: str | None = Field(None, description="Row label the others are compared against "
                                 "(default: the variant marked baseline).")


class Study(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="Experiment name in MLflow.")
    description: str = ""
    base: dict[str, Any] = Field(default_factory=dict, description="Shared trial config: model, data, train, eval (and che for CHE tasks).")
    axes: dict[str, list[Any]] = Field(default_factory=dict, description="Grid over dotted keys.")
    one_at_a_time: bool = Field(False, description="Vary each axis alone from the baseline instead of a grid.")
    zip: dict[str, list[Any]] = Field(default_factory=dict, description="Dotted keys whose values vary together.")
    exclude: list[dict[str, Any]] = Field(default_factory=list, description="Partial assignments to drop.")
    variants: list[Variant] = Field(default_factory=list)
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    search: Search = Field(default_factory=Search)
    scheduler: Scheduler = Field(default_factory=Scheduler)
    resources: Resources = Field(default_factory=Resources)
    profiles: dict[str, dict[str, Any]] = Field(default_factory=dict, description="Named dotted overrides of the study.")
    report: ReportSpec = Field(default_factory=ReportSpec)

    @field_validator("axes", "zip")
    @classmethod
    def _non_empty_lists(cls, values: dict[str, list[Any]]) -> dict[str, list[Any]]:
        empty = [key for key, items in values.items() if not items]
        if empty:
            raise ValueError(f"{empty[0]!r} has no values; give at least one or remove it")
        for key in values:
            if key.split(".")[0] not in SECTIONS:
                raise ValueError(f"{key!r} must start with one of the sections {', '.join(SECTIONS)}")
        return values

    @field_validator("zip")
    @classmethod
    def _zip_lengths(cls, values: dict[str, list[Any]]) -> dict[str, list[Any]]:
        lengths = {key: len(items) for key, items in values.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"zipped lists must have equal lengths, got {lengths}")
        return values

    @field_validator("seeds")
    @classmethod
    def _distinct_seeds(cls, seeds: list[int]) -> list[int]:
        if len(set(seeds)) != len(seeds):
            raise ValueError(f"seeds repeat ({seeds}); each seed runs once")
        return seeds

    @model_validator(mode="after")
    def _consistent(self) -> "Study":
        labels = [variant.label for variant in self.variants]
        duplicates = sorted({label for label in labels if labels.count(label) > 1})
        if duplicates:
            raise ValueError(f"variants: duplicate label(s) {duplicates}; each row of the report needs its own name")
        if sum(variant.baseline for variant in self.variants) > 1:
            raise ValueError("variants: more than one variant is marked baseline: true; mark exactly one")
        if self.search.algorithm != "grid" and (self.axes or self.zip):
            raise ValueError(
                f"search.algorithm {self.search.algorithm!r} cannot take grid 'axes'/'zip' (Ray Tune's samplers "
                "do not expand grids): declare them in search.space as {type: choice, values: [...]}"
            )
        if self.one_at_a_time and not self.axes:
            raise ValueError("one_at_a_time: true needs 'axes' to vary")
        if self.report.baseline is not None:
            labels = [cell.label for cell in self.cells()]
            if self.report.baseline not in labels:
                raise ValueError(f"report.baseline {self.report.baseline!r} is not a row of this study; rows: {labels}")
        overlap = set(self.axes) & set(self.zip)
        if overlap:
            raise ValueError(f"keys {sorted(overlap)} appear in both 'axes' and 'zip'; use one")
        return self

    @property
    def baseline_label(self) -> str | None:
        if self.report.baseline:
            return self.report.baseline
        marked = [cell.label for cell in self.cells() if cell.baseline]
        return marked[0] if marked else None

    def _points(self) -> list[dict[str, Any]]:
        """Swept assignments: the axes grid (or one-at-a-time) crossed with the zipped rows, minus excludes."""
        zipped = [dict(zip(self.zip, values)) for values in zip(*self.zip.values())] if self.zip else [{}]
        if self.one_at_a_time:
            # The first value of each axis is its baseline value; each other value is varied alone.
            first = {key: values[0] for key, values in self.axes.items()}
            grid = [first] + [{**first, key: value} for key, values in self.axes.items() for value in values[1:]]
        else:
            grid = [dict(zip(self.axes, values)) for values in itertools.product(*self.axes.values())]
        points = [{**g, **z} for g in grid for z in zipped]
        return [p for p in points if not any(all(p.get(k) == v for k, v in ex.items()) for ex in self.exclude)]

    def cells(self) -> list[Cell]:
        """The study's rows before seeds: each variant (or the base alone) crossed with the swept points."""
        variants = self.variants or [Variant(label=self.name, baseline=True)]
        points = self._points()
        cells = []
        for index, variant in enumerate(variants):
            for number, point in enumerate(points):
                suffix = ", ".join(f"{key.split('.')[-1]}={value}" for key, value in point.items())
                label = f"{variant.label} ({suffix})" if suffix and self.variants else (suffix or variant.label)
                parts = [f"variants[{index}] ({variant.label})"] if self.variants else []
                parts += [f"axes.{key}={value!r}" for key, value in point.items()]
                # The baseline row: the baseline variant at its first swept point; without variants, the
                # one-at-a-time centre point (a plain grid has no natural baseline).
                baseline = number == 0 and (variant.baseline if self.variants else self.one_at_a_time)
                cells.append(Cell(label=label, variant=variant.label, overrides={**variant.set, **point},
                                  baseline=baseline, where=" with ".join(parts) or "base", swept=dict(point)))
        return cells


# --- dotted overrides --------------------------------------------------------------------------------


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


def apply_study_overrides(raw: dict, overrides: dict[str, Any]) -> dict:
    """Dotted overrides of the study document. A key not naming a study field is taken relative to `base`
    (`train.steps=100` means `base.train.steps=100`), the way a researcher types it on the command line."""
    study_fields = set(Study.model_fields)
    absolute = {(key if key.split(".")[0] in study_fields else f"base.{key}"): value for key, value in overrides.items()}
    return resolve(raw, absolute)


def parse_override(text: str) -> tuple[str, Any]:
    """`key=value` from the command line; the value is read as YAML (numbers, lists, booleans)."""
    if "=" not in text:
        raise ValueError(f"override {text!r} is not of the form key=value")
    key, value = text.split("=", 1)
    return key.strip(), yaml.safe_load(value)


# --- validation ---------------------------------------------------------------------------------------


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


def parse_study(raw: Any, source: str = "<study>", profile: str | None = None,
                overrides: dict[str, Any] | None = None) -> Study:
    """Validate a loaded YAML document into a Study, or raise StudyError listing every problem.

    `profile` applies one of the study's named override sets; `overrides` (from the command line) come last.
    """
    if not isinstance(raw, dict):
        raise StudyError(source, [f"(top level): expected a mapping of study fields, got {type(raw).__name__}"])
    original, raw = copy.deepcopy(raw), copy.deepcopy(raw)
    if profile is not None:
        profiles = raw.get("profiles") or {}
        if not isinstance(profiles, dict) or profile not in profiles:
            names = ", ".join(profiles) if isinstance(profiles, dict) and profiles else "none defined"
            raise StudyError(source, [f"--profile {profile!r}: no such profile in 'profiles' (available: {names})"])
        try:
            raw = apply_study_overrides(raw, profiles[profile] or {})
        except (ValueError, AttributeError) as error:
            raise StudyError(source, [f"profiles.{profile}: {error}"]) from None
    if overrides:
        try:
            raw = apply_study_overrides(raw, overrides)
        except (ValueError, AttributeError) as error:
            raise StudyError(source, [f"command-line override: {error}"]) from None
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
        for key, dist in study.search.space.items():
            sample = dist.values[0] if dist.type == "choice" else (int(dist.low) if dist.type == "int" else dist.low)
            _, found = validate_config(resolve(study.base, {key: sample}), f"search.space.{key}")
            problems += [p for p in found if p not in problems]
        if not study.cells():
            problems.append("exclude: every combination is excluded; nothing would run")
    for name, overrides_of_profile in study.profiles.items():
        if name == profile:
            continue  # validated above, as the study itself
        try:
            # Profiles apply to the file as written, not on top of another profile.
            profiled = Study.model_validate(apply_study_overrides(copy.deepcopy(original), overrides_of_profile))
        except (ValidationError, ValueError, AttributeError) as error:
            detail = _format_pydantic(error, "study", Study) if isinstance(error, ValidationError) else [str(error)]
            problems += [f"profiles.{name}: {p}" for p in detail]
            continue
        _, found = validate_config(profiled.base, f"profiles.{name} -> base")
        problems += found
    if problems:
        raise StudyError(source, problems)
    return study


def read_study_yaml(path: str | Path) -> Any:
    path = Path(path)
    if not path.is_file():
        raise StudyError(str(path), ["(file): no such study file"])
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        hint = " (tags that construct Python objects are refused: plain YAML only)" if "python/" in str(error) else ""
        raise StudyError(str(path), [f"(YAML): not valid YAML{hint}: {error}"]) from None


def load_study(path: str | Path, profile: str | None = None, overrides: dict[str, Any] | None = None) -> Study:
    return parse_study(read_study_yaml(path), str(path), profile=profile, overrides=overrides)

"""Loading a study: YAML read with `safe_load`, a profile and command-line overrides applied, the study
validated by pydantic, then every resolved trial config validated by dape_core, so that a bad value in a
variant, a search space or a profile is reported with its name and field path before anything is launched.
Every problem is collected and reported at once (StudyError)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from dape_core import ExperimentConfig

from .model import Study
from .overrides import apply_study_overrides, resolve
from .problems import StudyError, format_pydantic


def validate_config(config: dict, where: str) -> tuple[ExperimentConfig | None, list[str]]:
    try:
        return ExperimentConfig(**config), []
    except ValidationError as error:
        return None, format_pydantic(error, where, ExperimentConfig)
    except TypeError as error:  # a section that is not a mapping
        return None, [f"{where}: {error}"]


def _apply(raw: dict, source: str, profile: str | None, overrides: dict[str, Any] | None) -> dict:
    """The document with the named profile, then the command line's overrides, applied."""
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
    return raw


def _trial_problems(study: Study) -> list[str]:
    """Every row's and every search dimension's resolved trial config (with its trial size), validated by
    dape_core; and rows that would be the same trial."""
    problems = _config_problems(study, {}, "base")
    if problems:
        return problems
    identities: dict[str, str] = {}
    for cell in study.cells():
        try:
            config = study.trial_config(cell.overrides)
        except ValueError as error:
            problems.append(f"{cell.where}: {error}")
            continue
        found = _config_problems(study, cell.overrides, cell.where)
        problems += [p for p in found if p not in problems]
        if not found:
            problems += _same_trial(identities, config, cell.where)
    for key, dist in study.search.space.items():
        sample = dist.values[0] if dist.type == "choice" else (int(dist.low) if dist.type == "int" else dist.low)
        found = _config_problems(study, {key: sample}, f"search.space.{key}")
        problems += [p for p in found if p not in problems]
    if not study.cells():
        problems.append("exclude: every combination is excluded; nothing would run")
    return problems


def _config_problems(study: Study, overrides: dict[str, Any], where: str) -> list[str]:
    """One trial config's problems. A trial size that came from `resources` is named as such."""
    config = study.trial_config(overrides)
    _, problems = validate_config(config, where)
    if not problems:
        problems = _size_problems(study, ExperimentConfig(**config), where)
    from_resources = not isinstance(resolve(study.base, overrides).get("distributed"), dict)
    if from_resources:
        problems = [f"{p} (distributed.* comes from resources.workers / resources.parallelism)"
                    if "distributed." in p else p for p in problems]
    return problems


def _size_problems(study: Study, config: ExperimentConfig, where: str) -> list[str]:
    gpus = study.resources.gpus
    if config.distributed.workers > 1 and gpus != int(gpus):
        return [f"{where}: distributed.workers={config.distributed.workers} needs whole GPUs per worker, got "
                f"resources.gpus={gpus:g}: each worker of a multi-worker trial drives its own GPU(s)"]
    return []


def _same_trial(identities: dict[str, str], config: dict, where: str) -> list[str]:
    """Two rows with one identity would be one trial run twice. The trial size is not part of the identity
    (the same run on any number of workers), so rows differing only in `distributed` collide too."""
    from ..planning.trials import trial_identity

    identity = trial_identity(config)
    if identity in identities:
        return [f"{where}: the same trial as {identities[identity]} (identical configs, apart from any "
                "distributed.* setting: the number of workers does not change what a trial computes); give the "
                "rows a difference in model, data, train or eval, or drop one"]
    identities[identity] = where
    return []


def _profile_problems(original: dict, study: Study, chosen: str | None) -> list[str]:
    """The profiles not chosen, each applied to the file as written (not on top of another profile)."""
    problems: list[str] = []
    for name, overrides_of_profile in study.profiles.items():
        if name == chosen:
            continue  # validated as the study itself
        try:
            profiled = Study.model_validate(apply_study_overrides(copy.deepcopy(original), overrides_of_profile))
        except (ValidationError, ValueError, AttributeError) as error:
            detail = format_pydantic(error, "study", Study) if isinstance(error, ValidationError) else [str(error)]
            problems += [f"profiles.{name}: {p}" for p in detail]
            continue
        problems += _config_problems(profiled, {}, f"profiles.{name} -> base")
    return problems


def parse_study(raw: Any, source: str = "<study>", profile: str | None = None,
                overrides: dict[str, Any] | None = None) -> Study:
    """Validate a loaded YAML document into a Study, or raise StudyError listing every problem.

    `profile` applies one of the study's named override sets; `overrides` (from the command line) come last.
    """
    if not isinstance(raw, dict):
        raise StudyError(source, [f"(top level): expected a mapping of study fields, got {type(raw).__name__}"])
    original = copy.deepcopy(raw)
    raw = _apply(copy.deepcopy(raw), source, profile, overrides)
    try:
        study = Study.model_validate(raw)
    except ValidationError as error:
        raise StudyError(source, format_pydantic(error, "study", Study)) from None
    problems = _trial_problems(study) + _profile_problems(original, study, profile)
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

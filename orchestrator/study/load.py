"""Loading a study: its YAML read so that it means one thing (yaml_loader.py), a profile and command-line
overrides applied, the study validated by pydantic, then every check that needs no data over every resolved
trial (trial_checks.py, sweeps.py, search_checks.py), and each profile's published values against its rows
(published_checks.py), for the chosen profile and for every other profile of the file, and, where the caller
asks (run, plan, validate), the data the chosen profile's trials would read (data_paths.py). A study's plugins
(`plugins:`, dape_core/plugins.py) are loaded first, so that the names they register validate like the
built-ins', and the components the resolved trials use are checked against the component contract
(contract_checks.py: a plugin's at every loading, every component's at `validate`) before anything can
launch. Every problem is collected and reported at once (StudyError), each with its field path;
problems of a profile that was not chosen are prefixed `profiles.<name>:`, and the error of a chosen profile
names it in its first line. The rows' resolved configs stay with the study returned (trial_checks.py's
`resolved_rows`): expanding it (trial/trials.py), its claims and its report resolve no row again.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from dape_core import ExperimentConfig

from .claim_checks import claim_problems, claim_reference_problems
from .contract_checks import contract_problems
from .data_paths import study_data_problems
from .decide_checks import decide_problems
from .locate import folder_problem, not_a_file_problem
from .model import Study
from .overrides import resolve
from .plugin_checks import load_plugins
from .problems import StudyError, format_pydantic
from .published_checks import resolve_published
from .search_checks import search_problems
from .sweeps import sweep_problems
from .trial_checks import (
    MAX_ROWS,
    ResolvedTrial,
    identity_problems,
    resolved_trials,
    row_count,
    run_name_problems,
    validate_config,
)
from .yaml_loader import MAX_BYTES, load_yaml

# The problems of trials that cannot finish (planning/feasibility.py's `check`), handed in by the commands.
Feasibility = Callable[[Study, list[ResolvedTrial]], list[str]]

__all__ = ["apply_study_overrides", "load_study", "parse_study", "profile_data_notes", "read_study", "read_study_yaml",
           "validate_config"]


def apply_study_overrides(raw: dict, overrides: dict[str, Any]) -> dict:
    """Dotted overrides of the study document. A key not naming a study field is taken relative to `base`
    (`train.steps=100` means `base.train.steps=100`), the way a researcher types it on the command line."""
    study_fields = set(Study.model_fields)
    absolute = {(key if key.split(".")[0] in study_fields else f"base.{key}"): value
                for key, value in overrides.items()}
    return resolve(raw, absolute)


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


def study_problems(study: Study) -> tuple[list[str], list[ResolvedTrial]]:
    """Every problem that needs no data, and the valid resolved trials (for the data check)."""
    if row_count(study) > MAX_ROWS:
        return resolved_trials(study)[1], []
    trials, trial_problems = resolved_trials(study)
    if not trial_problems:  # kept: the claims below, `expand` and the report read them (each row resolved once)
        study._rows = tuple(trial for trial in trials if trial.cell is not None)
    if not trial_problems:  # claims resolve against valid rows; else what can be resolved: labels and metrics
        claims = claim_problems(study)
    else:
        claims = claim_reference_problems([claim.model_dump() for claim in study.expect],
                                          [variant.label for variant in study.variants])
    problems = (sweep_problems(study) + trial_problems + identity_problems(trials) + run_name_problems(study)
                + search_problems(study, trials) + claims + decide_problems(study))
    return problems, trials


def _config_problems(raw: dict, error: ValidationError, known: list[str]) -> list[str]:
    """The trial configs' own problems (base's, and each row's: a variant's `set:`, an axis value) where the
    study's fields have some too, so that one run reports them all (a typo at the top, one in base.model, one in
    a variant's `set:`) rather than the configs' only once the others are fixed. The rows are those of the study
    without its failing fields; where that is no study either, base's alone."""
    failing = {item["loc"][0] for item in error.errors() if item["loc"]}
    try:
        rest = Study.model_validate({key: value for key, value in raw.items() if key not in failing})
    except ValidationError:
        rest = None
    if rest is not None and "base" not in failing:
        return [problem for problem in resolved_trials(rest)[1] if problem not in known]
    base = raw.get("base")
    if not isinstance(base, dict) or any(problem.startswith("study.base") for problem in known):
        return []
    return [problem for problem in validate_config(base, "base")[1] if problem not in known]


def _claim_problems(raw: dict) -> list[str]:
    """The claims' labels and metrics, where the study itself is invalid: checked against the variant labels
    the file declares and every known metric (claim_checks.py), so that a claim's typo is not left for a second
    round."""
    claims, variants = raw.get("expect"), raw.get("variants")
    if not isinstance(claims, list):
        return []
    labels = [variant.get("label") for variant in variants if isinstance(variant, dict)] \
        if isinstance(variants, list) else []
    return claim_reference_problems(claims, [label for label in labels if isinstance(label, str)])


def _profiled(original: dict, name: str) -> tuple[Study | None, list[str]]:
    """A profile applied to the file as written (not on top of another profile), validated as a Study."""
    try:
        overridden = apply_study_overrides(copy.deepcopy(original), original["profiles"][name] or {})
        return Study.model_validate(overridden), []
    except ValidationError as error:
        return None, format_pydantic(error, "study", Study, overridden)
    except (ValueError, AttributeError) as error:
        return None, [str(error)]


def _profile_problems(original: dict, chosen: str | None, known: list[str]) -> list[str]:
    """The problems of the profiles not chosen, less those the chosen study already reports."""
    problems: list[str] = []
    profiles = original.get("profiles")
    for name in profiles if isinstance(profiles, dict) else ():
        if name == chosen:
            continue  # validated as the study itself
        profiled, found = _profiled(original, name)
        if profiled is not None:
            found = study_problems(profiled)[0]
            found += resolve_published(profiled, name)[1] if not found else []
        problems += [f"profiles.{name}: {problem}" for problem in found if problem not in known]
    return problems


def parse_study(raw: Any, source: str = "<study>", profile: str | None = None,
                overrides: dict[str, Any] | None = None, *, check_data: bool = False,
                problems: list[str] | tuple[str, ...] = (), folder: Path | str = ".", contract: bool = False,
                feasibility: Feasibility | None = None) -> Study:
    """Validate a loaded YAML document into a Study, or raise StudyError listing every problem.

    `profile` applies one of the study's named override sets; `overrides` (from the command line) come last.
    `check_data`: also report the data files the trials would read that do not exist. `problems`: found
    already (duplicate keys of the YAML), reported with the others. `folder`: the study file's, where the
    plugin files it names are. `contract`: check every trial's components against the component contract,
    built-ins' included (`validate`); a plugin's components are checked at every loading. `feasibility`
    (validate, plan, run: planning/feasibility.py's `check`): the problems of trials that cannot finish, run
    once the study is otherwise valid.
    """
    if profile is not None:
        source = f"{source} (profile {profile})"
    if not isinstance(raw, dict):
        raise StudyError(source, [*problems, f"(top level): expected a mapping of study fields, got "
                                             f"{type(raw).__name__}"])
    original = copy.deepcopy(raw)
    raw = _apply(copy.deepcopy(raw), source, profile, overrides)
    plugins, plugin_faults = load_plugins(raw.get("plugins"), folder)
    if plugin_faults:  # the names they would register cannot be validated without them
        raise StudyError(source, [*problems, *plugin_faults])
    try:
        study = Study.model_validate(raw)
    except ValidationError as error:
        found = format_pydantic(error, "study", Study, raw)
        found += _config_problems(raw, error, found)
        found += _claim_problems(raw)
        if profile is None:  # the other profiles' own problems too (a chosen profile's are the study's)
            found += _profile_problems(original, profile, found)
        raise StudyError(source, [*problems, *found]) from None
    study._profile = profile
    study._plugins = tuple(plugins)
    found, trials = study_problems(study)
    if profile is not None and not found:
        found += resolve_published(study, profile)[1]
    found = [*problems, *found, *contract_problems(trials, plugins, everything=contract)]
    found += _profile_problems(original, profile, found)
    if check_data and trials:
        found += study_data_problems(ExperimentConfig(**study.base).data, trials)
    if feasibility is not None and trials and not found:
        found += feasibility(study, trials)
    if found:
        raise StudyError(source, found)
    return study


def profile_data_notes(raw: Any, chosen: str | None) -> list[str]:
    """The data problems of the profiles not chosen: notes for `validate` (that data is needed only when the
    profile runs, perhaps on another machine), each prefixed `profiles.<name>:`."""
    if not isinstance(raw, dict) or not isinstance(raw.get("profiles"), dict):
        return []
    notes = []
    for name in raw["profiles"]:
        if name == chosen:
            continue
        profiled, _ = _profiled(raw, name)
        if profiled is None:
            continue
        trials = study_problems(profiled)[1]
        if trials:
            base = ExperimentConfig(**profiled.base).data
            notes += [f"profiles.{name}: {note}" for note in study_data_problems(base, trials)]
    return notes


def read_study(path: str | Path) -> tuple[Any, list[str]]:
    """(the YAML document, its duplicate-key problems); StudyError for a file that cannot be read as YAML."""
    path = Path(path)
    if path.is_dir():
        raise StudyError(str(path), [folder_problem(path)])
    if not path.is_file():
        raise StudyError(str(path), [not_a_file_problem(path)])
    try:
        text = _read_bounded(path).decode("utf-8")
    except UnicodeDecodeError as error:
        raise StudyError(str(path), [f"(file): not UTF-8 text (byte {error.object[error.start]:#04x} at offset "
                                     f"{error.start}); save the study file as UTF-8"]) from None
    except OSError as error:
        raise StudyError(str(path), [f"(file): cannot be read: {error.strerror or error}"]) from None
    try:
        return load_yaml(text)
    except yaml.YAMLError as error:
        hint = " (tags that construct Python objects are refused: plain YAML only)" if "python/" in str(error) else ""
        raise StudyError(str(path), [f"(YAML): not valid YAML{hint}: {error}"]) from None


def _read_bounded(path: Path) -> bytes:
    """The file's bytes, refused by its size before it is read (a file that grows meanwhile: at most one byte
    past the bound is read): a study file is a few KB, and a huge one must not fill the machine's memory."""
    size = path.stat().st_size
    data = b""
    if size <= MAX_BYTES:
        with path.open("rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    if max(size, len(data)) > MAX_BYTES:
        raise StudyError(str(path), [f"(file): {max(size, len(data)):,} bytes, more than the {MAX_BYTES:,} a study "
                                     "file may hold (a study file is a few KB); name the study's YAML file"])
    return data


def read_study_yaml(path: str | Path) -> Any:
    """The study file's YAML document; StudyError when it cannot be read, or gives a key twice."""
    document, duplicates = read_study(path)
    if duplicates:
        raise StudyError(str(path), duplicates)
    return document


def load_study(path: str | Path, profile: str | None = None, overrides: dict[str, Any] | None = None, *,
               check_data: bool = False, contract: bool = False, feasibility: Feasibility | None = None) -> Study:
    document, duplicates = read_study(path)
    return parse_study(document, str(path), profile=profile, overrides=overrides, check_data=check_data,
                       problems=duplicates, folder=Path(path).parent, contract=contract,
                       feasibility=feasibility)

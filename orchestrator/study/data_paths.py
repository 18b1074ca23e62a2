"""Is the data every trial will read there, and does it match what the study says? Found at validation (run,
plan, validate), before anything is created or launched, instead of by every trial (and each retry) at its
first line, after Ray has started.

The checks themselves are dape_core's `data_problems`: the file system, a prepared token file's metadata
(dtype, split, tokenizer) and the tokenizer file, never the corpus. Relative paths are anchored at the launch
folder (where the command runs), as the trainable anchors them: each Ray Tune trial runs in a folder of its
own. Each distinct `data:` section is checked once and reported with the first row that uses it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dape_core.data import DataConfig, data_problems

if TYPE_CHECKING:
    from .trial_checks import ResolvedTrial

GUIDE_SECTION = 'docs/guides/corpus.md, "Preparing a corpus"'


def prepare_hint(cfg: DataConfig) -> str:
    """The command that makes a missing token file (and its tokenizer) where the section looks for them."""
    if cfg.source != "tokens":
        return f"; see {GUIDE_SECTION}"
    assert cfg.path is not None, "a tokens source has a path (DataConfig's validation)"
    folder = Path(cfg.path).parent
    return f"; prepare it with `orchestrator data prepare CORPUS --output {folder}` ({GUIDE_SECTION})"


def section_problems(cfg: DataConfig, launch_dir: Path) -> list[str]:
    """What stands in the way of loading this `data:` section in trials launched from `launch_dir`."""
    return data_problems(cfg, prepare_hint(cfg), root=launch_dir)


def study_data_problems(base: DataConfig, trials: list["ResolvedTrial"], launch_dir: Path | None = None) -> list[str]:
    """The data problems of every distinct data section the trials use, named "base.data..." for the base's
    section and by the first row that uses it for another (CHE trials read no data). `launch_dir`: the folder
    relative paths are taken from (default: the working directory, where `orchestrator run` launches)."""
    launch_dir = Path.cwd() if launch_dir is None else launch_dir
    seen: set[str] = set()
    problems = []
    for trial in trials:
        data = trial.config.data
        if trial.config.che is not None or repr(data) in seen:
            continue
        seen.add(repr(data))
        found = section_problems(data, launch_dir)
        problems += [f"base.{problem}" if data == base else f"{trial.where}: {problem}" for problem in found]
    return problems


def unprepared_data(study) -> list[str]:
    """The data problems of the study's rows (what `check_data` refuses), for a command that sizes the study
    without reading its data (`plan`, `slurm --dry-run`): [] where the data is there, or no row is valid."""
    from dape_core import ExperimentConfig

    from .trial_checks import resolved_rows

    try:
        rows = resolved_rows(study)
    except ValueError:  # the rows' own problems are the validation's
        return []
    return study_data_problems(ExperimentConfig(**study.base).data, rows)


def unprepared_line(problems: list[str]) -> str:
    """One line on data not prepared yet: the first problem (with how to prepare it), what else is missing, and
    what the command did without it."""
    more = f" (and {len(problems) - 1} more: `orchestrator validate` lists them)" if len(problems) > 1 else ""
    return (f"The data is not prepared: {problems[0]}{more}. Sized from the study's declared model (its "
            "vocabulary and lengths), without it; `orchestrator run` refuses until it is there.")

"""Data a study's trials would read and that is not there: found at validation, not by every trial at its first
line (a missing text folder used to fail each trial, and each retry, with a traceback).

Only the file system is consulted (existence, and for text whether any matching file has bytes); no corpus is
read. Relative paths are taken from the folder the command runs in, as dape_core reads them. The checks are
per distinct `data:` section, each reported once with the first row that uses it.
"""

from __future__ import annotations

import glob
from pathlib import Path
from typing import TYPE_CHECKING

from dape_core.data import DataConfig

if TYPE_CHECKING:
    from .trial_checks import ResolvedTrial

PREPARE_HINT = "prepare it (see README 'Preparing a corpus')"


def _shown(path: Path) -> str:
    return str(path) if path.is_absolute() else f"{path} (relative to {Path.cwd()}, where the command runs)"


def _text_problems(cfg: DataConfig, path: Path) -> list[str]:
    if path.is_file():
        return [] if path.stat().st_size else [f"data.path: the text file {_shown(path)} is empty"]
    if path.is_dir():
        files = (p for p in path.glob(cfg.pattern) if p.is_file())
        what = f"no file in the folder {_shown(path)} matches data.pattern {cfg.pattern!r}"
    elif glob.has_magic(cfg.path):
        files = (Path(p) for p in glob.iglob(str(path), recursive=True) if Path(p).is_file())
        what = f"the glob {_shown(path)} matches no file"
    else:
        return [f"data.path: {_shown(path)} does not exist; give the text file, folder or glob to train on"]
    first = next(files, None)
    if first is None:
        return [f"data.path: {what}"]
    if first.stat().st_size == 0 and not any(p.stat().st_size for p in files):
        return [f"data.path: every file matched in {_shown(path)} is empty"]
    return []


def data_problems(cfg: DataConfig) -> list[str]:
    """What stands in the way of loading this `data:` section, found without reading the corpus."""
    if cfg.source == "stdlib":
        problems = []
    else:
        path = Path(cfg.path).expanduser()
        if cfg.source == "text":
            problems = _text_problems(cfg, path)
        elif cfg.source == "tokens":
            problems = [] if path.is_file() else [f"data.path: no token file at {_shown(path)}: {PREPARE_HINT}"]
        else:  # hf_disk
            problems = [] if path.is_dir() else [f"data.path: no saved dataset folder at {_shown(path)}: write one "
                                                 "with the datasets library's Dataset.save_to_disk"]
    tokenizer = Path(cfg.tokenizer).expanduser()
    if cfg.tokenizer != "byte" and not tokenizer.is_file():
        problems.append(f"data.tokenizer: no tokenizer file at {_shown(tokenizer)}: {PREPARE_HINT}, or name an "
                        "existing tokenizer.json (it is never downloaded)")
    return problems


def study_data_problems(base: DataConfig, trials: list["ResolvedTrial"]) -> list[str]:
    """The data problems of every distinct data section the trials use, named "base.data..." for the base's
    section and by the first row that uses it for another (CHE trials read no data)."""
    seen: set[str] = set()
    problems = []
    for trial in trials:
        data = trial.config.data
        if trial.config.che is not None or repr(data) in seen:
            continue
        seen.add(repr(data))
        found = data_problems(data)
        problems += [f"base.{problem}" if data == base else f"{trial.where}: {problem}" for problem in found]
    return problems

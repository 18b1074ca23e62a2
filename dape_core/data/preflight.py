"""Checks of a `data:` section that need no corpus read, for a caller about to launch many trials, and the
anchoring of its relative paths.

`data_problems` finds, in milliseconds, what would otherwise fail every trial (and each retry) at its first
line: a missing or empty text path, a missing token file, saved dataset or tokenizer, or a prepared token
file whose metadata disagrees with the section (dtype, split, tokenizer). It reads the file system, the
metadata and the tokenizer file, never the corpus (the trial still checks the file itself against its hash).

`anchored` resolves relative paths against the folder they were written for: a trial may run in another
working directory (Ray Tune starts each trial in its own folder) than the one the study was launched from.
"""

from __future__ import annotations

import dataclasses
import glob
from pathlib import Path
from typing import Any

from .config import DataConfig
from .prepared import config_problems
from .token_meta import read_metadata


def anchored(cfg: DataConfig, root: str | Path) -> DataConfig:
    """`cfg` with a relative `path` and `tokenizer` made absolute under `root` (absolute ones unchanged)."""
    changes: dict[str, Any] = {}
    if cfg.path is not None and not Path(cfg.path).expanduser().is_absolute():
        changes["path"] = str(Path(root) / cfg.path)
    if cfg.tokenizer != "byte" and not Path(cfg.tokenizer).expanduser().is_absolute():
        changes["tokenizer"] = str(Path(root) / cfg.tokenizer)
    return dataclasses.replace(cfg, **changes) if changes else cfg


def _shown(given: str, root: Path | None) -> str:
    """A path as the study gives it, with the folder a relative one is taken from."""
    if root is None or Path(given).expanduser().is_absolute():
        return given
    return f"{given} (relative to {root})"


def _text_problems(cfg: DataConfig, path: Path, shown: str) -> list[str]:
    """A text path that gives no bytes to train on: missing, a folder or glob matching nothing, all empty."""
    assert cfg.path is not None, "a text source has a path (DataConfig's validation)"
    if path.is_file():
        return [] if path.stat().st_size else [f"data.path: the text file {shown} is empty"]
    if path.is_dir():
        files = (p for p in path.glob(cfg.pattern) if p.is_file())
        what = f"no file in the folder {shown} matches data.pattern {cfg.pattern!r}"
    elif glob.has_magic(cfg.path):
        files = (Path(p) for p in glob.iglob(str(path), recursive=True) if Path(p).is_file())
        what = f"the glob {shown} matches no file"
    else:
        return [f"data.path: {shown} does not exist; give the text file, folder or glob to train on"]
    first = next(files, None)
    if first is None:
        return [f"data.path: {what}"]
    if first.stat().st_size == 0 and not any(p.stat().st_size for p in files):
        return [f"data.path: every file matched in {shown} is empty"]
    return []


def _path_problems(cfg: DataConfig, path: Path, shown: str, prepare_hint: str) -> list[str]:
    if cfg.source == "text":
        return _text_problems(cfg, path, shown)
    if cfg.source == "tokens" and not path.is_file():
        return [f"data.path: no token file at {shown}{prepare_hint}"]
    if cfg.source == "hf_disk" and not path.is_dir():
        return [f"data.path: no saved dataset folder at {shown}: write one with the datasets library's "
                "Dataset.save_to_disk"]
    return []


def data_problems(cfg: DataConfig, prepare_hint: str = "", root: str | Path | None = None) -> list[str]:
    """Every problem that stands in the way of loading this data, found without reading the corpus; [] when
    nothing does. Each starts with its field (`data.path: ...`). Relative paths are taken from `root` (the
    folder trials will be anchored at; default: the working directory), and shown as written plus that folder.
    `prepare_hint` ("; prepare it with ...") is the caller's word on how to make a missing token file or
    tokenizer."""
    root = None if root is None else Path(root)
    real = cfg if root is None else anchored(cfg, root)
    problems: list[str] = []
    if cfg.source != "stdlib":  # stdlib: only the tokenizer to check
        assert cfg.path is not None and real.path is not None, "every other source has a path (DataConfig's validation)"
        path = Path(real.path).expanduser()
        problems = _path_problems(real, path, _shown(cfg.path, root), prepare_hint)
        if cfg.source == "tokens" and not problems:
            try:
                meta = read_metadata(path)
            except ValueError as error:
                return [f"data.path: {error}"]
            if meta is not None:  # the metadata knows the tokenizer too: its checks name the file to set
                return config_problems(real, meta, path)
    if cfg.tokenizer != "byte" and not Path(real.tokenizer).expanduser().is_file():
        alternative = ", or name an existing tokenizer.json" if prepare_hint else ""
        problems.append(f"data.tokenizer: no tokenizer file at {_shown(cfg.tokenizer, root)}{prepare_hint}"
                        f"{alternative} (it is never downloaded)")
    return problems

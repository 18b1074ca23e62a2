"""Checks of a `data:` section that need no corpus read, for a caller about to launch many trials, and the
anchoring of its relative paths.

`data_problems` finds, in milliseconds, what would otherwise fail every trial at its first line: a missing
token file, text path or tokenizer, or a prepared token file whose metadata disagrees with the section. It
reads the metadata and the tokenizer file, never the corpus (the trial still checks the file itself).

`anchored` resolves relative paths against the folder they were written for: a trial may run in another
working directory (Ray Tune starts each trial in its own folder) than the one the study was launched from.
"""

from __future__ import annotations

import dataclasses
import glob
from pathlib import Path

from .config import DataConfig
from .prepared import config_problems
from .token_meta import read_metadata


def anchored(cfg: DataConfig, root: str | Path) -> DataConfig:
    """`cfg` with a relative `path` and `tokenizer` made absolute under `root` (absolute ones unchanged)."""
    changes = {}
    if cfg.path is not None and not Path(cfg.path).expanduser().is_absolute():
        changes["path"] = str(Path(root) / cfg.path)
    if cfg.tokenizer != "byte" and not Path(cfg.tokenizer).expanduser().is_absolute():
        changes["tokenizer"] = str(Path(root) / cfg.tokenizer)
    return dataclasses.replace(cfg, **changes) if changes else cfg


def _path_problems(cfg: DataConfig) -> list[str]:
    path = Path(cfg.path).expanduser()
    if cfg.source == "tokens" and not path.is_file():
        return [f"data.path: no token file at {path}"]
    if cfg.source == "text" and not path.exists() and not (glob.has_magic(cfg.path) and glob.glob(str(path),
                                                                                                recursive=True)):
        return [f"data.path: {path} does not exist"]
    if cfg.source == "hf_disk" and not path.is_dir():
        return [f"data.path: no saved dataset at {path}"]
    return []


def data_problems(cfg: DataConfig) -> list[str]:
    """What stands in the way of loading this data, found without reading the corpus; [] when nothing does."""
    if cfg.source == "stdlib":
        return []
    problems = _path_problems(cfg)
    if problems:
        return problems
    if cfg.source == "tokens":
        path = Path(cfg.path).expanduser()
        meta = read_metadata(path)
        if meta is not None:
            return config_problems(cfg, meta, path)
    if cfg.tokenizer != "byte" and not Path(cfg.tokenizer).expanduser().is_file():
        return [f"data.tokenizer: no tokenizer file at {Path(cfg.tokenizer).expanduser()}"]
    return []

"""Where raw text is found on disk, for both readers of it (`sources.py`, which reads a corpus into memory for
training, and `inputs.py`, which streams one to `prepare_corpus`): a file, a folder or a glob expanded to its
files, and a saved Hugging Face dataset loaded with its split and text column checked.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass
from pathlib import Path
from typing import Literal


@dataclass(frozen=True)
class Expanded:
    """A path's files, sorted, with the root their document keys are relative to. `kind` says what the path was
    (`missing`: nothing there, and no files); a folder or a glob may match no file."""

    root: Path
    files: list[Path]
    kind: Literal["file", "folder", "glob", "missing"]


def expand_path(spec: str, patterns: tuple[str, ...]) -> Expanded:
    """The files of a file, a folder (its files matching any of `patterns`) or a glob (`**` recursive)."""
    path = Path(spec).expanduser()
    if path.is_file():
        return Expanded(path.parent, [path], "file")
    if path.is_dir():
        return Expanded(path, sorted({p for pattern in patterns for p in path.glob(pattern) if p.is_file()}), "folder")
    if glob.has_magic(spec):
        return Expanded(glob_root(path), sorted(Path(p) for p in glob.glob(str(path), recursive=True)
                                                if Path(p).is_file()), "glob")
    return Expanded(path, [], "missing")


def glob_root(pattern: Path) -> Path:
    """The part of a glob before its first wildcard: document keys are relative to it."""
    fixed = []
    for part in pattern.parts:
        if glob.has_magic(part):
            break
        fixed.append(part)
    return Path(*fixed) if fixed else Path(".")


def import_datasets(path: Path):
    """The `datasets` package, or an ImportError saying how to install it."""
    try:
        import datasets
    except ImportError as error:
        raise ImportError(f"reading the saved Hugging Face dataset at {path} needs the Hugging Face 'datasets' "
                          "package, which is not installed: pip install datasets (or pip install "
                          "'dape-orchestrator[hf]')") from error
    return datasets


def load_saved_dataset(path: Path, split: str, text_field: str, settings: str = ""):
    """The split `split` of the dataset `Dataset.save_to_disk` wrote at `path` (a plain Dataset is its own split),
    checked to have the column `text_field`. `settings`: the prefix of the settings the errors name (`data.`)."""
    datasets = import_datasets(path)
    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        if split not in loaded:
            raise ValueError(f"{settings}hf_split {split!r} is not in the dataset at {path}; it has: "
                             f"{', '.join(loaded)}")
        loaded = loaded[split]
    if text_field not in loaded.column_names:
        raise ValueError(f"{settings}text_field {text_field!r} is not a column of the dataset at {path}; "
                         f"columns: {', '.join(loaded.column_names)}")
    return loaded

"""Where raw data comes from: documents of text (the embedded stdlib snapshot, text files, a saved HF dataset)
or a token file.

Document sources return `(key, bytes)` pairs; the key (a relative path, `path#i` for a file split on a
separator, or a row index) decides the document's split, so adding files does not reshuffle the others
(except that a document repeating an earlier one's content follows that one: splits.py).
A token file is memory-mapped and never read whole: a 100 GB file costs no RAM.
"""

from __future__ import annotations

import hashlib
import warnings
from pathlib import Path

import numpy as np

from .config import DataConfig
from .raw_inputs import expand_path, import_datasets, load_saved_dataset
from .snapshot import snapshot_documents

Document = tuple[str, bytes]
FULL_HASH_LIMIT = 256 << 20  # bytes of token file hashed whole; larger files are hashed by samples
HASH_SAMPLES, HASH_SAMPLE_BYTES = 64, 1 << 20


def stdlib_documents(cfg: DataConfig) -> list[Document]:
    """The embedded snapshot of CPython 3.11.7's standard library (snapshot.py), the same bytes on every
    machine whatever Python runs it; the first `max_files` files."""
    return snapshot_documents(cfg.max_files)


def text_files(cfg: DataConfig) -> tuple[Path, list[Path]]:
    """(root the keys are relative to, files in sorted order) for a file, a folder or a glob."""
    assert cfg.path is not None, "a text source has a path (DataConfig's validation)"
    found = expand_path(cfg.path, (cfg.pattern,))
    if found.kind == "missing":
        raise FileNotFoundError(f"data.path: {found.root} does not exist")
    if not found.files:
        where = (f"folder {found.root} (data.pattern {cfg.pattern!r})" if found.kind == "folder"
                 else f"glob {cfg.path!r}")
        raise FileNotFoundError(f"data.path: no files match in {where}")
    return found.root, found.files


def _split_on(key: str, content: bytes, separator: str | None) -> list[Document]:
    if separator is None:
        return [(key, content)]
    parts = content.split(separator.encode())
    return [(f"{key}#{i}", part) for i, part in enumerate(parts) if part.strip()]


BINARY_PROBE = 8192  # bytes of a file looked at for a NUL byte, as git decides that a file is binary


def text_documents(cfg: DataConfig) -> list[Document]:
    """The text files' documents. Files that are not text (a NUL byte in their first 8 KB: images, archives,
    compiled files in a source tree) are skipped with a warning that counts them; none left is an error."""
    root, files = text_files(cfg)
    if cfg.max_files is not None:
        files = files[: cfg.max_files]
    documents, skipped = [], []
    for path in files:
        content = path.read_bytes()
        if b"\x00" in content[:BINARY_PROBE]:
            skipped.append(path)
            continue
        documents.extend(_split_on(path.relative_to(root).as_posix(), content, cfg.separator))
    if skipped and len(skipped) == len(files):
        raise ValueError(f"data.path: none of the {len(files)} file(s) of {cfg.path} is text (each holds NUL "
                         f"bytes, e.g. {skipped[0]}); point data.path or data.pattern at text files")
    if skipped:
        warnings.warn(f"data.path: skipped {len(skipped)} of {len(files)} file(s) of {cfg.path} that are not text "
                      f"(NUL bytes), e.g. {skipped[0]}; narrow data.pattern to leave them out", stacklevel=2)
    return documents


def hf_disk_documents(cfg: DataConfig) -> list[Document]:
    assert cfg.path is not None, "an hf_disk source has a path (DataConfig's validation)"
    path = Path(cfg.path).expanduser()
    import_datasets(path)  # first: a missing package is the problem to fix first
    if not path.exists():
        raise FileNotFoundError(f"data.path: no saved dataset at {path} (write one with Dataset.save_to_disk)")
    loaded = load_saved_dataset(path, cfg.hf_split, cfg.text_field, settings="data.")
    rows = len(loaded) if cfg.max_files is None else min(len(loaded), cfg.max_files)
    column = loaded.select(range(rows))[cfg.text_field]
    documents = []
    for index, text in enumerate(column):
        if not isinstance(text, str):
            raise ValueError(f"data.text_field {cfg.text_field!r}: row {index} holds {type(text).__name__}, not text")
        documents.extend(_split_on(str(index), text.encode("utf-8"), cfg.separator))
    return documents


def read_documents(cfg: DataConfig) -> list[Document]:
    readers = {"stdlib": stdlib_documents, "text": text_documents, "hf_disk": hf_disk_documents}
    return readers[cfg.source](cfg)


def documents_hash(documents: list[Document]) -> hashlib._Hash:
    hasher = hashlib.sha256()
    for key, content in documents:
        content = content.replace(b"\x00", b"")
        if content:  # empty files carry nothing to train on, and were never hashed
            hasher.update(key.encode() + b"\x00" + content)
    return hasher


def open_token_file(cfg: DataConfig) -> np.ndarray:
    """A read-only memory map of a `.bin` (raw ids of `data.dtype`) or a 1-D `.npy` token file."""
    assert cfg.path is not None, "a tokens source has a path (DataConfig's validation)"
    path = Path(cfg.path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"data.path: no token file at {path}")
    if path.suffix == ".npy":
        tokens = np.load(path, mmap_mode="r")
        if tokens.ndim != 1:
            raise ValueError(f"data.path: {path} holds an array of shape {tokens.shape}; a token stream is 1-D")
        if not np.issubdtype(tokens.dtype, np.integer):
            raise ValueError(f"data.path: {path} holds {tokens.dtype} values; token ids are integers")
        return tokens
    itemsize = np.dtype(cfg.dtype).itemsize
    size = path.stat().st_size
    if size == 0:
        raise ValueError(f"data.path: token file {path} is empty")
    if size % itemsize:
        raise ValueError(f"data.path: {path} has {size} bytes, not a multiple of {itemsize} (data.dtype {cfg.dtype}); "
                         "is data.dtype right?")
    return np.memmap(path, dtype=cfg.dtype, mode="r")


def token_file_hash(path: Path) -> str:
    """sha256 of the file; above FULL_HASH_LIMIT, of its size and evenly spaced 1 MiB samples (fast on 100 GB)."""
    size = path.stat().st_size
    hasher = hashlib.sha256(str(size).encode())
    with path.open("rb") as handle:
        if size <= FULL_HASH_LIMIT:
            for block in iter(lambda: handle.read(1 << 24), b""):
                hasher.update(block)
        else:
            for i in range(HASH_SAMPLES):
                handle.seek((size - HASH_SAMPLE_BYTES) * i // (HASH_SAMPLES - 1))
                hasher.update(handle.read(HASH_SAMPLE_BYTES))
    return hasher.hexdigest()

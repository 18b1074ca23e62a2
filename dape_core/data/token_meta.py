"""The metadata written beside a prepared token file, and the check that the file is still the one it describes.

`prepare_corpus` writes `tokens.bin` and `tokens.meta.json` (plus `tokens.docs.npy`, the held-out documents'
spans, and the tokenizer). The metadata makes what used to be a full scan at the start of every trial a
lookup: the vocabulary, the largest id in the file, the split (documents grouped by split: train, then
validation, then test) and a content hash.

Which check runs at every trial start, and why. Hashing the whole file is what `sha256` in the metadata
records, but re-hashing 100 GB at each trial is itself the scan this metadata exists to avoid (minutes per
trial, and it evicts the page cache the trainer needs). So a trial checks, in milliseconds:
- the size, exactly (catches truncation, appending, a different dtype, a different corpus);
- a sha256 of `SAMPLE_BLOCKS` blocks of `SAMPLE_BYTES` at fixed, evenly spaced offsets, the first and the
  last block included (catches a re-tokenized or regenerated file, whose every block differs, and a
  partial overwrite at either end);
- the modification time, as a note only: copying the dataset to another machine changes it legitimately.
A small edit that touches no sampled block escapes this check; `verify_token_file(path, full=True)`
(`orchestrator data verify`) re-hashes everything against the recorded sha256.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path

import numpy as np

FORMAT = "dape-tokens/1"
META_SUFFIX = ".meta.json"
DOCS_SUFFIX = ".docs.npy"
SAMPLE_BLOCKS, SAMPLE_BYTES = 64, 64 << 10
HASH_BLOCK = 16 << 20


class TokenFileChanged(ValueError):
    """The token file is not the one its metadata describes: training on it would train on something else."""


def metadata_path(token_path: Path) -> Path:
    """tokens.bin -> tokens.meta.json (beside it)."""
    return token_path.with_name(token_path.stem + META_SUFFIX)


def documents_path(token_path: Path) -> Path:
    return token_path.with_name(token_path.stem + DOCS_SUFFIX)


def sampled_sha256(path: Path, size: int | None = None) -> str:
    """sha256 of the size and of SAMPLE_BLOCKS fixed blocks (the whole file when it is smaller)."""
    size = path.stat().st_size if size is None else size
    hasher = hashlib.sha256(str(size).encode())
    with path.open("rb") as handle:
        if size <= SAMPLE_BLOCKS * SAMPLE_BYTES:
            hasher.update(handle.read())
        else:
            for i in range(SAMPLE_BLOCKS):
                handle.seek((size - SAMPLE_BYTES) * i // (SAMPLE_BLOCKS - 1))
                hasher.update(handle.read(SAMPLE_BYTES))
    return hasher.hexdigest()


def full_sha256(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(HASH_BLOCK), b""):
            hasher.update(block)
    return hasher.hexdigest()


def fingerprint(path: Path, sha256: str) -> dict:
    """What a trial re-checks cheaply, plus the full hash computed while the file was written."""
    stat = path.stat()
    return {"bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": sha256,
            "sampled_sha256": sampled_sha256(path, stat.st_size),
            "sample": {"blocks": SAMPLE_BLOCKS, "block_bytes": SAMPLE_BYTES}}


def read_metadata(token_path: Path) -> dict | None:
    """The metadata of a token file, or None when it has none (a file made by another tool)."""
    path = metadata_path(token_path)
    if not path.is_file():
        return None
    try:
        meta = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: unreadable token-file metadata ({error}); re-run the preparation or delete "
                         "the file to use the token file without it") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"{path}: not token-file metadata of format {FORMAT!r} (format "
                         f"{meta.get('format') if isinstance(meta, dict) else None!r})")
    return meta


def _changed(path: Path, what: str) -> TokenFileChanged:
    return TokenFileChanged(
        f"token file {path} changed since it was prepared: {what}. Training on it would not train on the "
        f"corpus its metadata ({metadata_path(path).name}) describes: prepare it again, or delete "
        f"{metadata_path(path).name} to use the file as it is (a full scan at every trial start)")


def verify_file(path: Path, recorded: dict, full: bool = False) -> None:
    """Size and sampled hash (or, with `full`, the whole file's sha256) against `recorded`."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing (its metadata names it)")
    size = path.stat().st_size
    if size != recorded["bytes"]:
        raise _changed(path, f"it holds {size} bytes, its metadata says {recorded['bytes']}")
    if full:
        if full_sha256(path) != recorded["sha256"]:
            raise _changed(path, "its sha256 differs from the one recorded")
        return
    if sampled_sha256(path, size) != recorded["sampled_sha256"]:
        raise _changed(path, f"the hash of {SAMPLE_BLOCKS} sampled blocks differs from the one recorded")
    if path.stat().st_mtime_ns != recorded["mtime_ns"]:
        warnings.warn(f"{path}: modified time differs from its metadata (a copy?); size and sampled blocks "
                      "match. A full check: verify_token_file(path, full=True) / orchestrator data verify",
                      stacklevel=3)


def verify_token_file(token_path: str | Path, full: bool = False) -> dict:
    """Check a prepared token file and its documents index against their metadata; return the metadata."""
    token_path = Path(token_path).expanduser()
    meta = read_metadata(token_path)
    if meta is None:
        raise FileNotFoundError(f"{token_path} has no metadata ({metadata_path(token_path).name}); only prepared "
                                "token files can be verified")
    verify_file(token_path, meta["content"], full)
    verify_file(documents_path(token_path), meta["documents_file"], full=True)  # small: held-out spans only
    return meta


def held_out_documents(token_path: Path, meta: dict, split: str) -> list[tuple[int, int]]:
    """[start, end) token spans of the documents of a held-out split, read from the documents index."""
    first, last = meta["split"][split]["document_rows"]
    if last == first:
        return []
    rows = np.load(documents_path(token_path), mmap_mode="r")[first:last]
    return [(int(start), int(end)) for start, end in rows]


def write_json_atomically(path: Path, payload: dict) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    with temporary.open("rb") as handle:
        os.fsync(handle.fileno())
    os.replace(temporary, path)

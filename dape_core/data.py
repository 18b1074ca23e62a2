"""Data sources: real text available on every machine, byte-level tokens, whole documents.

The default corpus is the Python standard library's own source (`*.py` under `sysconfig`'s stdlib path,
site-packages excluded), so nothing is downloaded. Each file is one document; documents are assigned to
train or validation as a whole by a hash of their path and the split seed, so the split is deterministic
and independent of file order. The corpus content hash is logged with every trial.
"""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from pydantic import ConfigDict, field_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

DOC_SEPARATOR = 0  # byte 0 never occurs in source text: marks document boundaries in the training stream


@pydantic_dataclass(config=ConfigDict(extra="forbid"))
class DataConfig:
    """source: `stdlib` (the default, embedded corpus). val_fraction: share of documents held out.
    split_seed: seeds the document split. max_files: cap on documents read (None = all), in path order."""

    source: str = "stdlib"
    val_fraction: float = 0.1
    split_seed: int = 0
    max_files: int | None = None

    @field_validator("source")
    @classmethod
    def _known_source(cls, value: str) -> str:
        if value != "stdlib":
            raise ValueError(f"unknown data source {value!r}; valid: stdlib")
        return value

    @field_validator("val_fraction")
    @classmethod
    def _fraction(cls, value: float) -> float:
        if not 0.0 < value < 1.0:
            raise ValueError(f"must be strictly between 0 and 1 (got {value})")
        return value


@dataclass
class Corpus:
    train: list[np.ndarray]
    validation: list[np.ndarray]
    content_hash: str
    vocab_size: int = 256

    @property
    def train_tokens(self) -> int:
        return sum(len(doc) for doc in self.train)


def stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts and p.is_file())


def _is_validation(relative_path: str, seed: int, fraction: float) -> bool:
    digest = hashlib.sha256(f"{seed}:{relative_path}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def load_corpus(cfg: DataConfig) -> Corpus:
    files = stdlib_files()
    if cfg.max_files is not None:
        files = files[: cfg.max_files]
    if not files:
        raise FileNotFoundError("no Python standard-library source files found for the 'stdlib' data source")
    root = Path(sysconfig.get_paths()["stdlib"])
    hasher = hashlib.sha256()
    train, validation = [], []
    for path in files:
        data = path.read_bytes().replace(b"\x00", b"")
        if not data:
            continue
        relative = path.relative_to(root).as_posix()
        hasher.update(relative.encode() + b"\x00" + data)
        doc = np.frombuffer(data, dtype=np.uint8)
        (validation if _is_validation(relative, cfg.split_seed, cfg.val_fraction) else train).append(doc)
    return Corpus(train=train, validation=validation, content_hash=hasher.hexdigest()[:16])


class TrainStream:
    """Random windows of T+1 tokens over the concatenated training documents (SPEC §5)."""

    def __init__(self, docs: list[np.ndarray], seed: int):
        pieces = []
        for doc in docs:
            pieces.append(doc)
            pieces.append(np.array([DOC_SEPARATOR], dtype=np.uint8))
        self.tokens = torch.from_numpy(np.concatenate(pieces).astype(np.int64))
        self.generator = torch.Generator().manual_seed(seed)

    def batch(self, batch_size: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        starts = torch.randint(0, len(self.tokens) - seq_len - 1, (batch_size,), generator=self.generator)
        windows = torch.stack([self.tokens[s : s + seq_len + 1] for s in starts.tolist()])
        return windows[:, :-1], windows[:, 1:]


def evaluation_windows(docs: list[np.ndarray], lengths: list[int], n_windows: int, seed: int) -> dict[int, torch.Tensor]:
    """Windows of L + 1 tokens for each length L, all ending at the same positions of the same held-out documents.

    Every length scores the same tail tokens and differs only in how much context precedes them, which
    makes ratios across lengths steadier (SPEC §6). Only documents of at least max(lengths) tokens are used.
    """
    longest = max(lengths) + 1  # a window reads L tokens and predicts the next one at every position
    ends = [(d, end) for d, doc in enumerate(docs) for end in range(longest, len(doc) + 1, longest)]
    if not ends:
        raise ValueError(f"no held-out document has {longest} tokens: lower the longest evaluation length")
    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(ends), size=min(n_windows, len(ends)), replace=False)
    chosen.sort()
    windows = {}
    for length in lengths:
        rows = [docs[ends[i][0]][ends[i][1] - length - 1 : ends[i][1]] for i in chosen]
        windows[length] = torch.from_numpy(np.stack(rows).astype(np.int64))
    return windows

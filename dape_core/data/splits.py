"""Deterministic train / validation / test splits, from a seed.

Documents are assigned one by one by a hash of their key and the seed: the split does not depend on file
order and a document never straddles two splits. A token file has no documents, so it is cut into chunks
of `chunk_tokens` and a seeded permutation of the chunks picks the held-out ones (exact fractions, at
least one chunk each).
"""

from __future__ import annotations

import hashlib

import numpy as np

TRAIN, VALIDATION, TEST = "train", "validation", "test"
SPLITS = (TRAIN, VALIDATION, TEST)


def document_split(key: str, seed: int, val_fraction: float, test_fraction: float) -> str:
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    u = int.from_bytes(digest[:8], "big") / 2**64
    if u < val_fraction:
        return VALIDATION
    if u < val_fraction + test_fraction:
        return TEST
    return TRAIN


def chunk_splits(n_chunks: int, seed: int, val_fraction: float, test_fraction: float) -> list[str]:
    n_val = max(1, round(n_chunks * val_fraction))
    n_test = max(1, round(n_chunks * test_fraction)) if test_fraction > 0 else 0
    if n_chunks - n_val - n_test < 1:
        raise ValueError(f"the token file holds only {n_chunks} chunk(s) of data.chunk_tokens tokens, too few for a "
                         f"train / held-out split ({n_val} validation, {n_test} test, at least 1 train): "
                         "lower data.chunk_tokens")
    order = np.random.default_rng(seed).permutation(n_chunks)
    labels = [TRAIN] * n_chunks
    for index in order[:n_val]:
        labels[index] = VALIDATION
    for index in order[n_val : n_val + n_test]:
        labels[index] = TEST
    return labels


def chunk_spans(labels: list[str], chunk_tokens: int, total: int) -> dict[str, list[tuple[int, int]]]:
    """Maximal runs of adjacent chunks with the same split, as [start, end) token ranges."""
    spans: dict[str, list[tuple[int, int]]] = {name: [] for name in SPLITS}
    for index, label in enumerate(labels):
        start, end = index * chunk_tokens, min(total, (index + 1) * chunk_tokens)
        runs = spans[label]
        if runs and runs[-1][1] == start:
            runs[-1] = (runs[-1][0], end)
        else:
            runs.append((start, end))
    return spans

"""Deterministic train / validation / test splits, from a seed.

Documents are assigned one by one by a hash of their key and the seed: the split does not depend on file
order and a document never straddles two splits. One exception, so that no held-out text is also trained
on: a document whose content equals an earlier one's (in corpus order) goes to that earlier document's
split (`DocumentSplitter`, used by the in-memory sources and by `prepare_corpus` alike). A token file has
no documents, so it is cut into chunks of `chunk_tokens` and a seeded permutation of the chunks picks the
held-out ones (exact fractions, at least one chunk each).
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


def content_digest(content: bytes) -> bytes:
    """What `DocumentSplitter` compares documents by (16 bytes of sha256); `content_hasher` for pieces."""
    return hashlib.sha256(content).digest()[:16]


def content_hasher():
    """A hasher whose `.digest()[:16]` over a document's pieces, fed in order, equals `content_digest`."""
    return hashlib.sha256()


class DocumentSplitter:
    """The split of each document, fed in corpus order: by its key's seeded hash (`document_split`), except
    that a document whose content equals an earlier one's goes to that earlier document's split. Without
    this, two identical files under two names (the stdlib's empty-but-for-a-docstring `__init__.py`s) could
    sit one in train, one in validation: the model would be scored on text it trained on. Keeps 16 bytes of
    digest per distinct document (about 100 bytes of memory each).

    `folded`: documents that took an earlier identical one's split; `moved`: those of them whose own key
    would have put them elsewhere (the duplicates that crossed splits under the key rule alone)."""

    def __init__(self, seed: int, val_fraction: float, test_fraction: float):
        self.seed, self.val_fraction, self.test_fraction = seed, val_fraction, test_fraction
        self._seen: dict[bytes, str] = {}
        self.folded = self.moved = 0

    def by_key(self, key: str) -> str:
        return document_split(key, self.seed, self.val_fraction, self.test_fraction)

    def assign(self, key: str, digest: bytes) -> str:
        """The split of the document `key` whose content has `digest` (`content_digest`); an empty document
        is not assigned here (it carries nothing: give it `by_key`)."""
        earlier = self._seen.get(digest)
        if earlier is None:
            self._seen[digest] = split = self.by_key(key)
            return split
        self.folded += 1
        self.moved += earlier != self.by_key(key)
        return earlier

    def record(self) -> dict:
        """For the data record: how many documents duplicated an earlier one and took its split."""
        return {"duplicates_folded": self.folded, "duplicates_moved": self.moved}


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

"""Windows of tokens: random training windows, and fixed held-out evaluation windows shared across lengths."""

from __future__ import annotations

import numpy as np
import torch


class TrainStream:
    """Random windows of T+1 tokens drawn uniformly from contiguous regions of the training split (SPEC §5).

    Only the drawn windows are read and widened to int64, so a memory-mapped token file stays on disk.
    The draw order is fixed by `seed`; `generator`'s state is what a checkpoint saves to resume it.
    """

    def __init__(self, regions: list[np.ndarray], seed: int):
        self.regions = [region for region in regions if len(region)]
        if not self.regions:
            raise ValueError("the training split is empty: no training tokens")
        self.generator = torch.Generator().manual_seed(seed)
        self._starts: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def _valid_starts(self, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
        """(starts per region, their running total). Windows never cross regions: a region's last valid
        start is len - seq_len - 2."""
        if seq_len not in self._starts:
            counts = np.array([max(0, len(region) - seq_len - 1) for region in self.regions])
            if counts.sum() < 1:
                raise ValueError(f"the training split has no stretch of {seq_len + 2} tokens for "
                                 f"train.seq_len={seq_len}")
            self._starts[seq_len] = counts, np.cumsum(counts)
        return self._starts[seq_len]

    def batch(self, batch_size: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        counts, ends = self._valid_starts(seq_len)
        draws = torch.randint(0, int(ends[-1]), (batch_size,), generator=self.generator).numpy()
        region_index = np.searchsorted(ends, draws, side="right")
        rows = []
        for draw, index in zip(draws.tolist(), region_index.tolist()):
            start = draw - (ends[index] - counts[index])
            rows.append(np.asarray(self.regions[index][start : start + seq_len + 1], dtype=np.int64))
        windows = torch.from_numpy(np.stack(rows))
        return windows[:, :-1], windows[:, 1:]


def evaluation_windows(docs: list[np.ndarray], lengths: list[int], n_windows: int, seed: int,
                       strict: bool = True) -> dict[int, torch.Tensor]:
    """Windows of L + 1 tokens for each length L, all ending at the same positions of the same held-out documents.

    Every length scores the same tail tokens and differs only in how much context precedes them, which
    makes ratios across lengths steadier (SPEC §6); so the window of the training length is the tail of
    every longer one, which is what ΔP compares. Windows are non-overlapping slots of max(lengths) + 1
    tokens inside one document, `n_windows` of them picked by `seed`. With `strict`, fewer available slots
    than `n_windows` is an error (the evaluation budget is fixed); otherwise all of them are used.
    """
    longest = max(lengths) + 1  # a window reads L tokens and predicts the next one at every position
    counts = np.array([len(doc) // longest for doc in docs], dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        biggest = max((len(doc) for doc in docs), default=0)
        raise ValueError(f"no held-out document has {longest} tokens (the longest has {biggest}): lower the longest "
                         "evaluation length or use longer held-out text")
    if strict and total < n_windows:
        raise ValueError(f"held-out text holds only {total} non-overlapping windows of {longest} tokens but the "
                         f"evaluation budget needs {n_windows}: lower eval.tokens_per_length (or eval.n_windows), "
                         "raise data.val_fraction, or add data")
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(total, size=min(n_windows, total), replace=False))
    cumulative = np.cumsum(counts)
    doc_index = np.searchsorted(cumulative, chosen, side="right")
    slot = chosen - (cumulative[doc_index] - counts[doc_index])
    ends = (slot + 1) * longest
    windows = {}
    for length in lengths:
        rows = [np.asarray(docs[d][end - length - 1 : end], dtype=np.int64) for d, end in zip(doc_index, ends)]
        windows[length] = torch.from_numpy(np.stack(rows))
    return windows

"""Windows of tokens: random training windows, and fixed held-out evaluation windows shared across lengths."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

from ..evaluate.config import PROTOCOL_VERSION  # noqa: F401 (the version of `tail_windows`)


class TokenBatch(NamedTuple):
    """A language-model batch: inputs [B, T] and their next tokens, targets [B, T]."""

    inputs: torch.Tensor
    targets: torch.Tensor

    @property
    def num_tokens(self) -> int:
        return self.inputs.numel()

    def to(self, device: torch.device) -> "TokenBatch":
        return TokenBatch(self.inputs.to(device, non_blocking=True), self.targets.to(device, non_blocking=True))


class TrainStream:
    """Random windows of seq_len + 1 tokens drawn uniformly from contiguous regions of the training split
    (docs/method.md §5): the LM experiment's batch source for `dape_core.train.train`.

    Only the drawn windows are read and widened to int64, so a memory-mapped token file stays on disk.
    The draw order is fixed by `seed`; `state_dict()` is what a checkpoint saves to resume it. Draws are
    sequential, so two batches of 4 are the same windows as one batch of 8 (gradient accumulation does not
    change the data).

    Several training processes (`world_size` > 1): every rank draws the same global batches from the same
    seed, and `batch(n)` returns rank `rank`'s n rows of a global batch of n x world_size, reading only those
    windows. Ranks thus read disjoint parts of the stream, and the union over ranks of one step's batches is
    the batch one process would have drawn, whatever the number of processes. The state is the same on every
    rank, so a checkpoint resumes on any number of them.
    """

    def __init__(self, regions: list[np.ndarray], seq_len: int, seed: int, rank: int = 0, world_size: int = 1):
        self.regions = [region for region in regions if len(region)]
        if not self.regions:
            raise ValueError("the training split is empty: no training tokens")
        self.seq_len = seq_len
        # Starts per region and their running total. Windows never cross regions: a region's last valid
        # start is len - seq_len - 2.
        self._counts = np.array([max(0, len(region) - seq_len - 1) for region in self.regions])
        if self._counts.sum() < 1:
            raise ValueError(f"the training split has no stretch of {seq_len + 2} tokens for train.seq_len={seq_len}")
        self._ends = np.cumsum(self._counts)
        self.generator = torch.Generator().manual_seed(seed)
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in a world of {world_size}")
        self.rank, self.world_size = rank, world_size

    def batch(self, batch_size: int) -> TokenBatch:
        counts, ends = self._counts, self._ends
        draws = torch.randint(0, int(ends[-1]), (batch_size * self.world_size,), generator=self.generator).numpy()
        draws = draws[self.rank * batch_size : (self.rank + 1) * batch_size]
        region_index = np.searchsorted(ends, draws, side="right")
        rows = []
        for draw, index in zip(draws.tolist(), region_index.tolist()):
            start = draw - (ends[index] - counts[index])
            rows.append(np.asarray(self.regions[index][start : start + self.seq_len + 1], dtype=np.int64))
        windows = torch.from_numpy(np.stack(rows))
        return TokenBatch(windows[:, :-1], windows[:, 1:])

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"].cpu())




def tail_windows(regions: list[np.ndarray], lengths: list[int], n_windows: int, tail: int,
                 seed: int) -> dict[int, torch.Tensor]:
    """Windows of L + 1 tokens for each length L, all ending at the same `n_windows` tails of `tail` tokens.

    The held-out split is read as one token stream: its regions end to end (documents with their separators,
    as GPT-NeoX's evaluation concatenates them), joined at its end to its start (one more document boundary).
    The tails are non-overlapping blocks of `tail` tokens of that stream, `n_windows` of them picked by `seed`:
    they depend on neither the lengths nor the longest one, so a length evaluated later scores the same
    tokens, with more context before them. The window at L is the L + 1 tokens ending at the tail's end, read
    around the joined stream where the tail lies less than L tokens from its start. ΔP's nesting holds: the
    window at the training length is the tail of every longer one.
    """
    regions = [region for region in regions if len(region)]
    sizes = np.array([len(region) for region in regions], dtype=np.int64)
    total = int(sizes.sum())
    longest = max(lengths) + 1  # a window reads L tokens and predicts the next one at every position
    if longest > total:
        raise ValueError(f"the held-out text holds {total} tokens, fewer than the {longest} a window at "
                         f"L={longest - 1} reads: lower the longest evaluation length or use more held-out text")
    slots = total // tail
    if slots < n_windows:
        raise ValueError(f"held-out text holds only {slots} tails of {tail} tokens but the evaluation budget needs "
                         f"{n_windows}: lower eval.tokens_per_length (or eval.n_windows), raise data.val_fraction, "
                         "or add data")
    rng = np.random.default_rng(seed)
    ends = (np.sort(rng.choice(slots, size=n_windows, replace=False)) + 1) * tail  # exclusive stream positions
    starts = np.concatenate([[0], np.cumsum(sizes)])
    return {length: torch.from_numpy(np.stack([_stream_slice(regions, starts, total, int(end) - length - 1, length + 1)
                                               for end in ends]))
            for length in lengths}


def _stream_slice(regions: list[np.ndarray], starts: np.ndarray, total: int, begin: int, count: int) -> np.ndarray:
    """`count` tokens of the joined stream from position `begin` (negative: from the stream's end), as int64;
    only the regions the slice touches are read (a memory-mapped split stays on disk)."""
    pieces, position, left = [], begin % total, count
    while left:
        index = int(np.searchsorted(starts, position, side="right")) - 1
        offset = position - int(starts[index])
        piece = regions[index][offset : offset + left]
        pieces.append(np.asarray(piece, dtype=np.int64))
        left -= len(piece)
        position = (position + len(piece)) % total
    return np.concatenate(pieces)


def evaluation_windows(docs: list[np.ndarray], lengths: list[int], n_windows: int, seed: int,
                       strict: bool = True) -> dict[int, torch.Tensor]:
    """Windows of L + 1 tokens for each length L, all ending at the same positions of the same held-out documents
    (protocol 1's evaluation windows; now `train.eval_every`'s validation windows).

    Every length scores the same tail tokens and differs only in how much context precedes them, which
    makes ratios across lengths steadier (docs/method.md §6); so the window of the training length is the tail of
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

"""Multi-query associative recall: THIS PROJECT'S EXTENSION (docs/method.md §8), not one of the CHE tasks.

DAPE V2's Proposition 1 argues that a convolution over attention scores lets a transformer do associative
recall without a position encoding (a 1x2 kernel [-1, 1] makes a query attend to the token right after
the earlier occurrence of the same key). The paper publishes no experiment; this task lets us run one at
the training lengths and at longer test lengths, with an encoder (CHE protocol) or a causal LM.

Tokens: keys are ids [0, num_keys), values are ids [num_keys, num_keys + num_values); `input_vocab_size`
= num_keys + num_values. A string is P key-value pairs `k1 v1 ... kP vP` followed by queries (keys of the
pairs); the answer to a query is the value paired with that key.

- Encoder form (`sample`, compatible with `dape_core.che.tasks.make_encoder_batch`): inputs
  `k1 v1 ... kP vP q1 ... qQ` of length n, with P = n // 3 and Q = n - 2P (so Q is P, P+1 or P+2);
  `targets [B, Q]` are the queried values as classes in [0, num_values) (value id - num_keys), read out
  at the Q placeholders appended after the input (the j-th placeholder answers the j-th query);
  `target_mask` is all True. Needs n >= 3.
- Causal form (`sample_causal`): a stream `k1 v1 ... kP vP q1 a1 ... qQ aQ [q]` of T + 1 tokens with
  h = (T + 1) // 2 two-token slots, P = ceil(h / 2) pairs and Q = h - P <= P queries, plus one trailing
  (unanswered) query key when T + 1 is odd; `tokens = stream[:T]`, `targets = stream[1:]` (next-token
  targets, value token ids), and `loss_mask` is True only at the query positions, whose next token is the
  queried value. Needs T >= 4.

Decisions:
- Keys within one string are distinct (drawn without replacement), so every query has one answer; values
  are drawn with replacement. Queries cover distinct keys in random order while Q <= P (always in the
  causal form, the MQAR convention of Arora et al. 2023 "Zoology"); the encoder form's Q - P extra
  queries (at most 2) repeat random keys.
- The counts grow with the length so that longer test strings hold more pairs and more queries (the
  length-generalisation question). Defaults num_keys = 256 and num_values = 32 allow encoder lengths up to
  770 and causal lengths up to 1024; a longer string raises ValueError (distinct keys must fit).
- `level` is "ext", `in_dape_table` False; otherwise it is a CHE `Task` (its interface, placeholder and
  vocabulary), with sizes set per instance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

import numpy as np

from .tasks import Batch, Task, as_tokens, check_request


@dataclass(frozen=True)
class CausalBatch:
    """Causal-LM form: tokens [B, T], next-token targets [B, T], loss_mask [B, T] (queried values only)."""

    tokens: np.ndarray
    targets: np.ndarray
    loss_mask: np.ndarray


def _random_perms(rng: np.random.Generator, batch_size: int, size: int, take: int) -> np.ndarray:
    """[B, take]: the first `take` entries of an independent random permutation of range(size) per row."""
    return np.argsort(rng.random((batch_size, size)), axis=1)[:, :take]


class AssociativeRecall(Task):
    """Multi-query associative recall (this project's extension; see the module docstring)."""

    name = "associative_recall"
    level = "ext"
    in_dape_table = False
    min_length = 3
    min_causal_length = 4

    def __init__(self, num_keys: int = 256, num_values: int = 32):
        if num_keys < 1 or num_values < 1:
            raise ValueError("num_keys and num_values must be positive")
        self.num_keys = int(num_keys)
        self.num_values = int(num_values)

    def __repr__(self) -> str:
        return f"AssociativeRecall(num_keys={self.num_keys}, num_values={self.num_values})"

    @property
    def input_vocab_size(self) -> int:  # type: ignore[override]  # Task's class constant, here from the sizes
        return self.num_keys + self.num_values

    @property
    def output_classes(self) -> int:  # type: ignore[override]  # as input_vocab_size
        return self.num_values

    # ---------------------------------------------------------------------------------- encoder form

    def counts(self, n: int) -> Tuple[int, int]:
        """(pairs P, queries Q) of an encoder string of length n: 2P + Q = n."""
        pairs = n // 3
        return pairs, n - 2 * pairs

    def output_length(self, n: int) -> int:
        return self.counts(n)[1]

    def _pairs_and_queries(self, rng: np.random.Generator, batch_size: int, pairs: int, queries: int):
        if pairs > self.num_keys:
            raise ValueError(f"{pairs} distinct keys needed but num_keys = {self.num_keys}")
        keys = _random_perms(rng, batch_size, self.num_keys, pairs)
        values = rng.integers(0, self.num_values, size=(batch_size, pairs), dtype=np.int64)
        distinct = min(pairs, queries)
        which = _random_perms(rng, batch_size, pairs, distinct)
        if queries > distinct:
            extra = rng.integers(0, pairs, size=(batch_size, queries - distinct))
            which = np.concatenate([which, extra], axis=1)
            which = np.take_along_axis(which, _random_perms(rng, batch_size, queries, queries), axis=1)
        return (keys.astype(np.int64), values,
                np.take_along_axis(keys, which, axis=1).astype(np.int64),
                np.take_along_axis(values, which, axis=1))

    def sample(self, rng: np.random.Generator, length: int, batch_size: int) -> Batch:
        """As `Task.sample`, but the answers are drawn with the strings rather than labelled after them."""
        check_request(length, batch_size, self.min_length)
        n, batch_size = int(length), int(batch_size)
        pairs, queries = self.counts(n)
        keys, values, q_keys, answers = self._pairs_and_queries(rng, batch_size, pairs, queries)
        inputs = np.empty((batch_size, n), dtype=np.int64)
        inputs[:, 0:2 * pairs:2] = keys
        inputs[:, 1:2 * pairs:2] = self.num_keys + values
        inputs[:, 2 * pairs:] = q_keys
        return Batch(inputs, answers, np.ones(answers.shape, dtype=bool))

    def label(self, inputs):
        """Targets of given encoder-form strings (the value class of each query)."""
        x = as_tokens(inputs)
        pairs, queries = self.counts(x.shape[1])
        out = np.zeros((x.shape[0], queries), dtype=np.int64)
        for b, row in enumerate(x.tolist()):
            table = {row[2 * i]: row[2 * i + 1] - self.num_keys for i in range(pairs)}
            out[b] = [table[q] for q in row[2 * pairs:]]
        return out, np.ones(out.shape, dtype=bool)

    # ----------------------------------------------------------------------------------- causal form

    def causal_counts(self, length: int) -> Tuple[int, int]:
        """(pairs P, answered queries Q) of a causal sequence of T = length tokens."""
        slots = (length + 1) // 2
        pairs = (slots + 1) // 2
        return pairs, slots - pairs

    def sample_causal(self, rng: np.random.Generator, length: int, batch_size: int) -> CausalBatch:
        check_request(length, batch_size, self.min_causal_length)
        t, batch_size = int(length), int(batch_size)
        pairs, queries = self.causal_counts(t)
        trailing = (t + 1) % 2  # one unanswered query key fills an odd stream
        keys, values, q_keys, answers = self._pairs_and_queries(rng, batch_size, pairs, queries)
        stream = np.empty((batch_size, t + 1), dtype=np.int64)
        stream[:, 0:2 * pairs:2] = keys
        stream[:, 1:2 * pairs:2] = self.num_keys + values
        q0 = 2 * pairs
        stream[:, q0:q0 + 2 * queries:2] = q_keys
        stream[:, q0 + 1:q0 + 2 * queries:2] = self.num_keys + answers
        if trailing:
            pick = rng.integers(0, pairs, size=(batch_size, 1))
            stream[:, -1:] = np.take_along_axis(keys, pick, axis=1)
        loss_mask = np.zeros((batch_size, t), dtype=bool)
        loss_mask[:, q0:q0 + 2 * queries:2] = True
        return CausalBatch(stream[:, :t].copy(), stream[:, 1:].copy(), loss_mask)


RECALL_TASKS = {"associative_recall": AssociativeRecall()}

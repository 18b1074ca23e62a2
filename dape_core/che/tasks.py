"""The 15 Chomsky-hierarchy (CHE) length-generalisation tasks of docs/method.md §7, as seeded numpy generators.

The tasks are those of Delétang et al. 2023, "Neural networks and the Chomsky hierarchy" (public repository
google-deepmind/neural_networks_chomsky_hierarchy), in the configuration of Ruoss et al. 2023 (randomized
positional encodings), which DAPE follows. This is an independent re-implementation: the alphabets, class
ids, output lengths, sampling distributions and termination conventions follow the original task files, but
all randomness comes from one `numpy.random.Generator`, so a batch is a pure function of (seed, length,
batch size).

Interface (every task in `TASKS`):

- `name`, `level` ("R", "DCF" or "CS"), `input_vocab_size`, `output_classes`, `output_length(n)`,
  `permutation_invariant`, `in_dape_table` (False only for binary_multiplication), `termination_class`
  (the end class for the three tasks that have one, else None), `min_length` (1 for every CHE task).
- `sample(rng, length, batch_size) -> Batch` with int64 `inputs [B, n]`, int64 `targets [B, out_len]` and
  bool `target_mask [B, out_len]`. All strings of a batch share n. n == length for every task except
  modular_arithmetic (see below); `input_length(length)` gives n.
- `label(inputs) -> (targets, target_mask)` computes the labels of any given input strings (used by the
  tests on hand-made strings; `sample` uses it wherever the labels are a function of the inputs).

`make_encoder_batch` builds the encoder-only input of docs/method.md §7: the n input tokens followed by out_len
placeholder tokens, placeholder id = `input_vocab_size` (so the model's input vocabulary is
`input_vocab_size + 1`); the model is read out at `output_positions`. This mirrors Ruoss et al.'s
`make_model_with_empty_targets` without computation steps (the empty-output token is `input_size`).

Decisions (where the sources are silent, disagree, or the original has a quirk):

- Masks: `target_mask` is True up to AND including the first termination class and False after it, for
  stack_manipulation, binary_addition and binary_multiplication (the original's `accuracy_mask`:
  `index <= argmax(target)`; the end class 2 is the largest class, so argmax finds its first occurrence).
  Every other task's mask is all True. Padding after the end class is class 0, as in the original.
- Lengths: the training length is drawn from U{1, ..., 40} once per step (all strings of a step share it,
  as the original's uniform curriculum does); test lengths are 41..500 (`TRAIN_MAX_LENGTH`,
  `TEST_LENGTHS`).
- modular_arithmetic: expressions have odd length; an even requested length n yields strings of length
  n - 1, exactly as the original (`input_length(n)`). Token 8 (the original's blank '_') is in the
  vocabulary (size 9) but never sampled; `label` treats it like the original (blank operator -> '+',
  blank digit -> 0). Usual precedence: '*' before '+'/'-', left to right.
- modular_arithmetic_brackets: operators {+, -, *} (`mult=True`, the configuration of both public
  experiment files), modulus 5, vocabulary 11 = digits 0-4, '+' 5, '-' 6, '*' 7, '(' 8, ')' 9 and id 10
  reserved for the original's unused 'x'. Expressions come from the original's recursive grammar: lengths
  1-4 are d, -d, (d), (-d); longer ones are (L op R) with |L| uniform in [1, n-4].
- solve_equation: operators {+, -} only (the original's default; x then has a unique solution), vocabulary
  11 = digits, '+' 5, '-' 6, '(' 7, ')' 8, 'x' 9, '=' 10. A bracket expression of length n-2 is drawn, a
  uniformly random position is moved forward (cyclically) to the next digit, that digit becomes x, and
  "=value" is appended. For n < 3 the original returns all-zero inputs with label 0; we do the same.
- missing_duplicate_string: vocabulary 4 = {0, 1, 2 = the missing symbol, 3 = padding for odd n}; for
  n == 1 the original's degenerate constant (input [1], label 1) is kept.
- odds_first: the original's docstring and code disagree; we follow the code, which produced the
  published numbers: the output is s[1::2] + s[::2] with 0-based indices (odd positions first).
- cycle_navigation: token t moves by t - 1 (0 = left, 1 = stay, 2 = right), as the original's code does
  (its docstring numbers the actions differently).
- binary_addition / binary_multiplication: little-endian operands with random digit counts
  |a| uniform in [1, n-2], |b| = n-1-|a|, each operand uniform in [1, 2^len - 1] (leading zeros allowed),
  separated by token 2; the result is little-endian without leading zeros, then the end class 2, then
  zeros. For n <= 2 the original's degenerate cases are kept (the input is a number in [0, 2^n - 1) and the
  sum is that number; the product is the empty string).
- binary_multiplication output length is n, as in both public code bases (the product has at most n - 1
  digits, plus the end class). The papers' CHE table says 2N; the extra positions would all be masked (after the
  end class), so accuracy is identical, but we do not pad them. The task is not in DAPE's table.
- compute_sqrt: big-endian number uniform in [1, 2^n - 1] (leading zeros allowed), output floor(sqrt)
  big-endian zero-padded to ceil(n/2) digits.
- stack_manipulation: for n >= 2 the initial stack has length uniform in [1, n-1], the rest are actions
  2 = POP (ignored on an empty stack), 3 = PUSH 0, 4 = PUSH 1; the output is the final stack top-to-bottom,
  then the end class 2, padded with 0 to n + 1. For n == 1 the input is one stack symbol.
- All uniform integers use numpy's Generator; the bignum tasks draw uniform bits and reject all-zero
  operands, which gives the same distributions as the original's `random.randint(1, 2**k - 1)`.
"""

from __future__ import annotations

import math
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

TRAIN_MAX_LENGTH = 40
TEST_LENGTHS = range(41, 501)

Labels = Tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class Batch:
    """One batch of a task: inputs [B, n], targets [B, out_len] (class ids), target_mask [B, out_len]."""

    inputs: np.ndarray
    targets: np.ndarray
    target_mask: np.ndarray

    @property
    def length(self) -> int:
        return int(self.inputs.shape[1])


@dataclass(frozen=True)
class EncoderBatch:
    """Encoder-only model input: `tokens [B, n + out_len]` = inputs then out_len placeholders.

    `output_positions [out_len]` are the placeholder indices (the same for every row); the model's logits
    at those positions are scored against `targets` where `target_mask` is True.
    """

    tokens: np.ndarray
    targets: np.ndarray
    target_mask: np.ndarray
    output_positions: np.ndarray
    input_length: int


def train_lengths(rng: np.random.Generator, batch: int, max_length: int = TRAIN_MAX_LENGTH,
                  min_length: int = 1) -> np.ndarray:
    """`batch` i.i.d. training lengths from U{min_length, ..., max_length} (default U{1..40}).

    Use one length per training step: every string of one step has that length (the original's uniform
    curriculum samples one length per step).
    """
    if not 1 <= min_length <= max_length:
        raise ValueError(f"need 1 <= min_length <= max_length, got {min_length}, {max_length}")
    return rng.integers(min_length, max_length + 1, size=batch, dtype=np.int64)


def check_request(length: int, batch_size: int, min_length: int = 1) -> None:
    """A ValueError unless `length` is an integer >= `min_length` and `batch_size` a positive integer."""
    if int(length) != length or length < min_length:
        raise ValueError(f"length must be an integer >= {min_length}, got {length!r}")
    if int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")


def as_tokens(inputs) -> np.ndarray:
    """Given strings as an int64 [B, n] array (one string [n] becomes [1, n])."""
    x = np.asarray(inputs, dtype=np.int64)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2:
        raise ValueError(f"inputs must be [B, n], got shape {x.shape}")
    return x


def _mask_through_first(targets: np.ndarray, end_class: int) -> np.ndarray:
    """True up to and including the first `end_class` of each row (all True if a row has none)."""
    is_end = targets == end_class
    last = np.where(is_end.any(axis=1), is_end.argmax(axis=1), targets.shape[1] - 1)
    return np.arange(targets.shape[1])[None, :] <= last[:, None]


def _nonzero_bits(rng: np.random.Generator, batch_size: int, n: int) -> np.ndarray:
    """[B, n] uniform bits with no all-zero row (rejection: uniform over [1, 2^n - 1])."""
    bits = rng.integers(0, 2, size=(batch_size, n), dtype=np.int64)
    bad = ~bits.any(axis=1)
    while bad.any():
        bits[bad] = rng.integers(0, 2, size=(int(bad.sum()), n), dtype=np.int64)
        bad = ~bits.any(axis=1)
    return bits


def _bits_to_int(bits: Sequence[int], little_endian: bool) -> int:
    s = "".join("1" if b else "0" for b in bits)
    if not s:
        return 0
    return int(s[::-1] if little_endian else s, 2)


def _int_to_le_bits(value: int) -> List[int]:
    """Little-endian digits without leading zeros ('0' -> [0], like the original's `f'{0:b}'`)."""
    return [int(c) for c in reversed(format(value, "b"))]


class Task:
    """Base class; subclasses set the class attributes and implement `_sample_inputs` and `label`."""

    name: str = ""
    level: str = ""
    input_vocab_size: int = 0
    output_classes: int = 0
    permutation_invariant: bool = False
    in_dape_table: bool = True
    termination_class: Optional[int] = None
    min_length: int = 1

    def output_length(self, n: int) -> int:
        return 1

    def input_length(self, n: int) -> int:
        """Length of the strings `sample(rng, n, ...)` produces (n except for modular_arithmetic)."""
        return n

    @property
    def placeholder_id(self) -> int:
        return self.input_vocab_size

    @property
    def model_vocab_size(self) -> int:
        return self.input_vocab_size + 1

    def sample(self, rng: np.random.Generator, length: int, batch_size: int) -> Batch:
        check_request(length, batch_size, self.min_length)
        inputs = self._sample_inputs(rng, int(length), int(batch_size))
        targets, mask = self.label(inputs)
        return Batch(inputs, targets, mask)

    def _sample_inputs(self, rng: np.random.Generator, n: int, batch_size: int) -> np.ndarray:
        raise NotImplementedError

    def label(self, inputs) -> Labels:
        raise NotImplementedError

    def _all_true(self, targets: np.ndarray) -> Labels:
        targets = np.ascontiguousarray(targets, dtype=np.int64)
        return targets, np.ones(targets.shape, dtype=bool)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


# ----------------------------------------------------------------------------------------------- regular


class EvenPairs(Task):
    """Is the number of '01' and '10' pairs even? (class 0: even)."""

    name, level, input_vocab_size, output_classes = "even_pairs", "R", 2, 2

    def _sample_inputs(self, rng, n, batch_size):
        return rng.integers(0, 2, size=(batch_size, n), dtype=np.int64)

    def label(self, inputs):
        x = as_tokens(inputs)
        odd = (x[:, 1:] != x[:, :-1]).sum(axis=1) % 2
        return self._all_true(odd[:, None])


class ModularArithmetic(Task):
    """Evaluate d op d op ... d (mod 5), ops in {+, -, *} with the usual precedence."""

    name, level, input_vocab_size, output_classes = "modular_arithmetic", "R", 9, 5
    modulus = 5
    PLUS, MINUS, TIMES, BLANK = 5, 6, 7, 8

    def input_length(self, n):
        return n if n % 2 == 1 else n - 1  # odd lengths only, like the original

    def _sample_inputs(self, rng, n, batch_size):
        m = self.input_length(n)
        x = np.empty((batch_size, m), dtype=np.int64)
        x[:, ::2] = rng.integers(0, self.modulus, size=(batch_size, m // 2 + 1))
        x[:, 1::2] = rng.integers(self.PLUS, self.TIMES + 1, size=(batch_size, m // 2))
        return x

    def label(self, inputs):
        x = as_tokens(inputs).copy()
        if x.shape[1] % 2 != 1:
            raise ValueError("modular_arithmetic expressions have odd length")
        mod = self.modulus
        # Blanks as in the original: operator position -> '+', digit position -> 0.
        digits, ops = x[:, ::2], x[:, 1::2]
        digits[digits == self.BLANK] = 0
        ops[ops == self.BLANK] = self.PLUS
        total = np.zeros(x.shape[0], dtype=np.int64)
        term = digits[:, 0] % mod  # the running product of the current additive term
        for k in range(ops.shape[1]):
            op, d = ops[:, k], digits[:, k + 1]
            is_mul = op == self.TIMES
            total = np.where(is_mul, total, total + term) % mod
            signed = np.where(op == self.MINUS, -d, d)
            term = np.where(is_mul, term * d, signed) % mod
        return self._all_true(((total + term) % mod)[:, None])


class ParityCheck(Task):
    """Is the number of 1s even? (class 0: even)."""

    name, level, input_vocab_size, output_classes = "parity_check", "R", 2, 2
    permutation_invariant = True

    def _sample_inputs(self, rng, n, batch_size):
        return rng.integers(0, 2, size=(batch_size, n), dtype=np.int64)

    def label(self, inputs):
        x = as_tokens(inputs)
        return self._all_true((x.sum(axis=1) % 2)[:, None])


class CycleNavigation(Task):
    """Final position on a 5-cycle starting at 0; token t moves by t - 1."""

    name, level, input_vocab_size, output_classes = "cycle_navigation", "R", 3, 5
    permutation_invariant = True

    def _sample_inputs(self, rng, n, batch_size):
        return rng.integers(0, 3, size=(batch_size, n), dtype=np.int64)

    def label(self, inputs):
        x = as_tokens(inputs)
        return self._all_true(((x - 1).sum(axis=1) % 5)[:, None])


# ----------------------------------------------------------------------------------- deterministic CF


class StackManipulation(Task):
    """Initial stack (0/1, bottom to top) then POP(2)/PUSH 0(3)/PUSH 1(4); output the stack top-down."""

    name, level, input_vocab_size, output_classes = "stack_manipulation", "DCF", 5, 3
    termination_class = 2
    POP, PUSH0, PUSH1 = 2, 3, 4

    def output_length(self, n):
        return n + 1

    def _sample_inputs(self, rng, n, batch_size):
        if n == 1:
            return rng.integers(0, 2, size=(batch_size, 1), dtype=np.int64)
        stack_len = rng.integers(1, n, size=batch_size)  # in [1, n-1]: at least one action
        bits = rng.integers(0, 2, size=(batch_size, n), dtype=np.int64)
        actions = rng.integers(self.POP, self.PUSH1 + 1, size=(batch_size, n), dtype=np.int64)
        return np.where(np.arange(n)[None, :] < stack_len[:, None], bits, actions)

    def label(self, inputs):
        x = as_tokens(inputs)
        n = x.shape[1]
        out = np.zeros((x.shape[0], n + 1), dtype=np.int64)
        for b, row in enumerate(x.tolist()):
            stack: List[int] = []
            for t in row:
                # Giving the initial stack bottom-to-top is the same as pushing its symbols in order.
                if t < 2:
                    stack.append(t)
                elif t == self.POP:
                    if stack:
                        stack.pop()
                else:
                    stack.append(t - self.PUSH0)
            result = stack[::-1] + [self.termination_class]
            out[b, : len(result)] = result
        return out, _mask_through_first(out, self.termination_class)


class ReverseString(Task):
    name, level, input_vocab_size, output_classes = "reverse_string", "DCF", 2, 2

    def output_length(self, n):
        return n

    def _sample_inputs(self, rng, n, batch_size):
        return rng.integers(0, 2, size=(batch_size, n), dtype=np.int64)

    def label(self, inputs):
        return self._all_true(as_tokens(inputs)[:, ::-1])


@contextmanager
def _recursion_headroom(depth: int) -> Iterator[None]:
    # The grammar's recursion is O(log n) deep on average but can reach n/4; make room for long strings.
    old = sys.getrecursionlimit()
    if depth + 200 > old:
        sys.setrecursionlimit(depth + 200)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def _bracket_expression(length: int, draws: List[float], modulus: int, mult: bool,
                        ids: Dict[str, int]) -> Tuple[List[int], int]:
    """The original's grammar for bracketed modular expressions, driven by pre-drawn U[0, 1) floats.

    Every node consumes at most one draw per output symbol, so `length` draws always suffice.
    Returns (token ids, value mod `modulus`).
    """
    out: List[int] = []
    it = iter(draws)
    plus, minus, lpar, rpar = ids["+"], ids["-"], ids["("], ids[")"]
    op_ids = [plus, minus] + ([ids["*"]] if mult else [])

    def gen(n: int) -> int:
        if n <= 4:
            d = int(next(it) * modulus)
            if n == 1:
                out.append(d)
                return d
            if n == 2:
                out.extend((minus, d))
                return -d % modulus
            if n == 3:
                out.extend((lpar, d, rpar))
                return d
            out.extend((lpar, minus, d, rpar))
            return -d % modulus
        left = 1 + int(next(it) * (n - 4))  # uniform in [1, n-4]
        op = int(next(it) * len(op_ids))
        out.append(lpar)
        a = gen(left)
        out.append(op_ids[op])
        b = gen(n - 3 - left)
        out.append(rpar)
        if op == 0:
            return (a + b) % modulus
        if op == 1:
            return (a - b) % modulus
        return (a * b) % modulus

    with _recursion_headroom(length // 2):
        value = gen(length)
    return out, value


def _evaluate_tokens(tokens: Sequence[int], modulus: int, ids: Dict[str, int]) -> int:
    """Evaluate a (bracketed) expression of token ids mod `modulus`; '*' binds tighter, unary '-'."""
    toks = list(tokens)
    pos = 0
    times = ids.get("*", -1)

    def peek() -> Optional[int]:
        return toks[pos] if pos < len(toks) else None

    def expr() -> int:
        nonlocal pos
        v = term()
        while peek() in (ids["+"], ids["-"]):
            op = toks[pos]
            pos += 1
            w = term()
            v = v + w if op == ids["+"] else v - w
        return v

    def term() -> int:
        nonlocal pos
        v = factor()
        while peek() == times:
            pos += 1
            v = v * factor()
        return v

    def factor() -> int:
        nonlocal pos
        t = peek()
        if t is None:
            raise ValueError("unexpected end of expression")
        pos += 1
        if 0 <= t < modulus:
            return t
        if t == ids["-"]:
            return -factor()
        if t == ids["("]:
            v = expr()
            if peek() != ids[")"]:
                raise ValueError("unbalanced brackets")
            pos += 1
            return v
        raise ValueError(f"unexpected token {t}")

    with _recursion_headroom(len(toks)):
        value = expr()
    if pos != len(toks):
        raise ValueError("trailing tokens")
    return value % modulus


class ModularArithmeticBrackets(Task):
    """Evaluate a fully bracketed expression over {+, -, *} mod 5."""

    name, level, input_vocab_size, output_classes = "modular_arithmetic_brackets", "DCF", 11, 5
    modulus = 5
    mult = True
    IDS = {"+": 5, "-": 6, "*": 7, "(": 8, ")": 9}  # 10 is the original's reserved (unused) 'x'

    def sample(self, rng, length, batch_size):
        check_request(length, batch_size)
        n, batch_size = int(length), int(batch_size)
        draws = rng.random((batch_size, n)).tolist()
        x = np.empty((batch_size, n), dtype=np.int64)
        y = np.empty((batch_size, 1), dtype=np.int64)
        for b in range(batch_size):
            toks, value = _bracket_expression(n, draws[b], self.modulus, self.mult, self.IDS)
            x[b] = toks
            y[b, 0] = value
        return Batch(x, y, np.ones(y.shape, dtype=bool))

    def label(self, inputs):
        x = as_tokens(inputs)
        y = [[_evaluate_tokens(row, self.modulus, self.IDS)] for row in x.tolist()]
        return self._all_true(np.array(y, dtype=np.int64).reshape(len(y), 1))


class SolveEquation(Task):
    """Solve a bracketed linear equation over {+, -} mod 5 for the unknown x."""

    name, level, input_vocab_size, output_classes = "solve_equation", "DCF", 11, 5
    modulus = 5
    IDS = {"+": 5, "-": 6, "(": 7, ")": 8}
    X, EQ = 9, 10

    def sample(self, rng, length, batch_size):
        check_request(length, batch_size)
        n, batch_size = int(length), int(batch_size)
        if n < 3:  # the original's degenerate case: all-zero inputs, label 0
            return Batch(np.zeros((batch_size, n), np.int64), np.zeros((batch_size, 1), np.int64),
                         np.ones((batch_size, 1), bool))
        draws = rng.random((batch_size, n - 2)).tolist()
        starts = rng.integers(0, n - 2, size=batch_size).tolist()
        x = np.empty((batch_size, n), dtype=np.int64)
        y = np.empty((batch_size, 1), dtype=np.int64)
        for b in range(batch_size):
            toks, value = _bracket_expression(n - 2, draws[b], self.modulus, False, self.IDS)
            i = starts[b]
            while toks[i] >= self.modulus:  # move to the next digit, cyclically (as the original)
                i = (i + 1) % len(toks)
            y[b, 0] = toks[i]
            toks[i] = self.X
            x[b] = toks + [self.EQ, value]
        return Batch(x, y, np.ones(y.shape, dtype=bool))

    def label(self, inputs):
        x = as_tokens(inputs)
        if x.shape[1] < 3:
            return self._all_true(np.zeros((x.shape[0], 1), dtype=np.int64))
        y = []
        for row in x.tolist():
            if row[-2] != self.EQ or row.count(self.X) != 1:
                raise ValueError("expected '<expression with one x> = <digit>'")
            lhs, rhs = row[:-2], row[-1]
            i = lhs.index(self.X)
            sols = [c for c in range(self.modulus)
                    if _evaluate_tokens(lhs[:i] + [c] + lhs[i + 1:], self.modulus, self.IDS) == rhs]
            if not sols:
                raise ValueError("equation has no solution")
            y.append([sols[0]])  # unique with {+, -}: x enters with coefficient +-1
        return self._all_true(np.array(y, dtype=np.int64))


# ------------------------------------------------------------------------------------ context-sensitive


class DuplicateString(Task):
    name, level, input_vocab_size, output_classes = "duplicate_string", "CS", 2, 2

    def output_length(self, n):
        return 2 * n

    def _sample_inputs(self, rng, n, batch_size):
        return rng.integers(0, 2, size=(batch_size, n), dtype=np.int64)

    def label(self, inputs):
        x = as_tokens(inputs)
        return self._all_true(np.concatenate([x, x], axis=1))


class MissingDuplicateString(Task):
    """ww with one symbol replaced by 2 (3 pads odd lengths); predict the missing symbol."""

    name, level, input_vocab_size, output_classes = "missing_duplicate_string", "CS", 4, 2
    MISSING, PAD = 2, 3

    def _sample_inputs(self, rng, n, batch_size):
        if n == 1:  # the original's degenerate constant
            return np.ones((batch_size, 1), dtype=np.int64)
        half = n // 2
        w = rng.integers(0, 2, size=(batch_size, half), dtype=np.int64)
        ww = np.concatenate([w, w], axis=1)
        idx = rng.integers(0, 2 * half, size=batch_size)
        ww[np.arange(batch_size), idx] = self.MISSING
        pad = np.full((batch_size, n % 2), self.PAD, dtype=np.int64)
        return np.concatenate([ww, pad], axis=1)

    def label(self, inputs):
        x = as_tokens(inputs)
        n = x.shape[1]
        if n == 1:
            return self._all_true(np.ones((x.shape[0], 1), dtype=np.int64))
        half = n // 2
        is_missing = x[:, : 2 * half] == self.MISSING
        if not (is_missing.sum(axis=1) == 1).all():
            raise ValueError("each row needs exactly one missing symbol")
        p = is_missing.argmax(axis=1)
        partner = np.where(p < half, p + half, p - half)
        return self._all_true(x[np.arange(x.shape[0]), partner][:, None])


class OddsFirst(Task):
    """Output s[1::2] then s[::2] (0-based indices; the original's code)."""

    name, level, input_vocab_size, output_classes = "odds_first", "CS", 2, 2

    def output_length(self, n):
        return n

    def _sample_inputs(self, rng, n, batch_size):
        return rng.integers(0, 2, size=(batch_size, n), dtype=np.int64)

    def label(self, inputs):
        x = as_tokens(inputs)
        return self._all_true(np.concatenate([x[:, 1::2], x[:, ::2]], axis=1))


class _BinaryOperation(Task):
    """Shared sampling of `a SEP b` with little-endian operands (binary addition / multiplication)."""

    level, input_vocab_size, output_classes = "CS", 3, 3
    termination_class = 2
    SEP = 2

    def _sample_inputs(self, rng, n, batch_size):
        if n <= 2:  # the original's degenerate case: one number in [0, 2^n - 1), fixed length
            numbers = rng.integers(0, 2 ** n - 1, size=batch_size)
            return ((numbers[:, None] >> np.arange(n)[None, :]) & 1).astype(np.int64)
        len_a = rng.integers(1, n - 1, size=batch_size)  # in [1, n-2]; |b| = n-1-|a| >= 1
        pos = np.arange(n)[None, :]
        in_a, in_b = pos < len_a[:, None], pos > len_a[:, None]
        bits = rng.integers(0, 2, size=(batch_size, n), dtype=np.int64)
        bad = ~((bits * in_a).any(axis=1) & (bits * in_b).any(axis=1))
        while bad.any():  # rejection: both operands uniform in [1, 2^len - 1]
            bits[bad] = rng.integers(0, 2, size=(int(bad.sum()), n), dtype=np.int64)
            bad = ~((bits * in_a).any(axis=1) & (bits * in_b).any(axis=1))
        bits[np.arange(batch_size), len_a] = self.SEP
        return bits

    def _result(self, row: List[int]) -> List[int]:
        raise NotImplementedError

    def label(self, inputs):
        x = as_tokens(inputs)
        n = x.shape[1]
        out_len = self.output_length(n)
        out = np.zeros((x.shape[0], out_len), dtype=np.int64)
        for b, row in enumerate(x.tolist()):
            result = self._result(row) + [self.termination_class]
            if len(result) > out_len:
                raise ValueError("result longer than the output length")
            out[b, : len(result)] = result
        return out, _mask_through_first(out, self.termination_class)

    def _operands(self, row: List[int]) -> Optional[Tuple[int, int]]:
        if self.SEP not in row:
            return None
        i = row.index(self.SEP)
        if self.SEP in row[i + 1:]:
            raise ValueError("more than one separator")
        return _bits_to_int(row[:i], True), _bits_to_int(row[i + 1:], True)


class BinaryAddition(_BinaryOperation):
    name = "binary_addition"

    def output_length(self, n):
        return n + 1

    def _result(self, row):
        ops = self._operands(row)
        value = _bits_to_int(row, True) if ops is None else ops[0] + ops[1]
        return _int_to_le_bits(value)


class BinaryMultiplication(_BinaryOperation):
    name = "binary_multiplication"
    in_dape_table = False

    def output_length(self, n):
        return n  # the original's; the papers' table says 2N (see the module docstring)

    def _result(self, row):
        ops = self._operands(row)
        if ops is None:  # the original's degenerate case: empty product for n == 1, [0] for n == 2
            return [0] * (len(row) - 1)
        return _int_to_le_bits(ops[0] * ops[1])


class ComputeSqrt(Task):
    """floor(sqrt(x)) of a big-endian binary number, big-endian, ceil(n/2) digits."""

    name, level, input_vocab_size, output_classes = "compute_sqrt", "CS", 2, 2

    def output_length(self, n):
        return math.ceil(n / 2)

    def _sample_inputs(self, rng, n, batch_size):
        return _nonzero_bits(rng, batch_size, n)

    def label(self, inputs):
        x = as_tokens(inputs)
        out_len = self.output_length(x.shape[1])
        out = np.zeros((x.shape[0], out_len), dtype=np.int64)
        for b, row in enumerate(x.tolist()):
            digits = format(math.isqrt(_bits_to_int(row, False)), "b").zfill(out_len)
            out[b] = [int(c) for c in digits]
        return self._all_true(out)


class BucketSort(Task):
    name, level, input_vocab_size, output_classes = "bucket_sort", "CS", 5, 5
    permutation_invariant = True

    def output_length(self, n):
        return n

    def _sample_inputs(self, rng, n, batch_size):
        return rng.integers(0, 5, size=(batch_size, n), dtype=np.int64)

    def label(self, inputs):
        return self._all_true(np.sort(as_tokens(inputs), axis=1))


TASKS: Dict[str, Task] = {
    t.name: t
    for t in (
        EvenPairs(), ModularArithmetic(), ParityCheck(), CycleNavigation(),
        StackManipulation(), ReverseString(), ModularArithmeticBrackets(), SolveEquation(),
        DuplicateString(), MissingDuplicateString(), OddsFirst(), BinaryAddition(),
        BinaryMultiplication(), ComputeSqrt(), BucketSort(),
    )
}


def get_task(name: str) -> Task:
    try:
        return TASKS[name]
    except KeyError:
        raise KeyError(f"unknown CHE task {name!r}; known: {sorted(TASKS)}") from None


def to_encoder_batch(batch: Batch, placeholder_id: int) -> EncoderBatch:
    """Append one placeholder per output position to a task batch."""
    bsz, n = batch.inputs.shape
    out_len = batch.targets.shape[1]
    tokens = np.concatenate(
        [batch.inputs, np.full((bsz, out_len), placeholder_id, dtype=np.int64)], axis=1)
    return EncoderBatch(tokens, batch.targets, batch.target_mask,
                        np.arange(n, n + out_len, dtype=np.int64), int(n))


def make_encoder_batch(task, rng: np.random.Generator, length: int, batch_size: int) -> EncoderBatch:
    """Sample a batch and build the encoder-only input: inputs then |y| placeholders (id input_vocab_size).

    Works for any object with `sample` and `input_vocab_size` (the CHE tasks and the recall extension).
    """
    if isinstance(task, str):
        task = get_task(task)
    return to_encoder_batch(task.sample(rng, length, batch_size), task.input_vocab_size)

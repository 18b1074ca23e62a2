"""CHE task generators (docs/method.md §7) and the associative-recall extension (docs/method.md §8).

Every generator's labels are compared with a slow, independent pure-Python reference (written from the
task definitions, not from the library's code): first on hand-made strings with known answers, then on
random samples of every task at many lengths. Also: determinism, shapes, vocabulary ranges, output-length
formulas, the encoder-batch layout and the training/test length constants.
"""

import math

import numpy as np
import pytest

from dape_core.che import (
    RECALL_TASKS,
    TASKS,
    TEST_LENGTHS,
    TRAIN_MAX_LENGTH,
    AssociativeRecall,
    make_encoder_batch,
    train_lengths,
)

# ----------------------------------------------------------------------------------- slow references
# Each reference maps one input string (a list of token ids) to (targets, mask) as Python lists.

ARITH_CHARS = {5: "+", 6: "-", 7: "*"}  # modular_arithmetic
BRACKET_CHARS = {5: "+", 6: "-", 7: "*", 8: "(", 9: ")"}  # modular_arithmetic_brackets
EQUATION_CHARS = {5: "+", 6: "-", 7: "(", 8: ")", 9: "x", 10: "="}  # solve_equation


def _decode(tokens, chars):
    return "".join(str(t) if t < 5 else chars[t] for t in tokens)


def _full(targets):
    return list(targets), [True] * len(targets)


def _until_end(targets, end=2):
    first = targets.index(end)
    return list(targets), [i <= first for i in range(len(targets))]


def ref_even_pairs(s):
    return _full([sum(1 for a, b in zip(s, s[1:]) if a != b) % 2])


def ref_modular_arithmetic(s):
    return _full([eval(_decode(s, ARITH_CHARS)) % 5])  # Python's precedence: * before + and -


def ref_parity_check(s):
    return _full([s.count(1) % 2])


def ref_cycle_navigation(s):
    position = 0
    for t in s:
        position += {0: -1, 1: 0, 2: 1}[t]
    return _full([position % 5])


def ref_stack_manipulation(s):
    n = len(s)
    split = 0
    while split < n and s[split] in (0, 1):
        split += 1
    stack = list(s[:split])  # bottom to top
    for action in s[split:]:
        if action == 2:
            if stack:
                stack.pop()
        elif action == 3:
            stack.append(0)
        elif action == 4:
            stack.append(1)
        else:
            raise AssertionError("stack symbol after the first action")
    out = list(reversed(stack)) + [2]
    return _until_end(out + [0] * (n + 1 - len(out)))


def ref_reverse_string(s):
    return _full(s[::-1])


def ref_modular_arithmetic_brackets(s):
    return _full([eval(_decode(s, BRACKET_CHARS)) % 5])


def ref_solve_equation(s):
    if len(s) < 3:
        return _full([0])
    text = _decode(s, EQUATION_CHARS)
    lhs, rhs = text.split("=")
    solutions = [x for x in range(5) if eval(lhs.replace("x", str(x))) % 5 == int(rhs)]
    assert len(solutions) == 1, (text, solutions)
    return _full(solutions)


def ref_duplicate_string(s):
    return _full(s + s)


def ref_missing_duplicate_string(s):
    if len(s) == 1:
        return _full([1])
    half = len(s) // 2
    first, second = s[:half], s[half:2 * half]
    if 2 in first:
        return _full([second[first.index(2)]])
    return _full([first[second.index(2)]])


def ref_odds_first(s):
    odd_positions = [s[i] for i in range(len(s)) if i % 2 == 1]
    even_positions = [s[i] for i in range(len(s)) if i % 2 == 0]
    return _full(odd_positions + even_positions)


def _le_value(bits):
    return sum(b << i for i, b in enumerate(bits))


def _le_digits(value):
    digits = []
    while value:
        digits.append(value & 1)
        value >>= 1
    return digits or [0]


def _add_bitwise(a, b):
    """Schoolbook little-endian addition of digit lists, without leading zeros."""
    out, carry = [], 0
    for i in range(max(len(a), len(b))):
        total = (a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) + carry
        out.append(total % 2)
        carry = total // 2
    if carry:
        out.append(1)
    while len(out) > 1 and out[-1] == 0:
        out.pop()
    return out or [0]


def ref_binary_addition(s):
    n = len(s)
    if 2 in s:
        i = s.index(2)
        result = _add_bitwise(s[:i], s[i + 1:])
    else:
        result = _le_digits(_le_value(s))
    out = result + [2]
    return _until_end(out + [0] * (n + 1 - len(out)))


def ref_binary_multiplication(s):
    n = len(s)
    if 2 in s:
        i = s.index(2)
        a, b = _le_value(s[:i]), _le_value(s[i + 1:])
        product = 0
        for k, bit in enumerate(s[i + 1:]):  # shift and add
            if bit:
                product += a << k
        assert product == a * b
        result = _le_digits(product)
    else:
        result = [0] * (n - 1)
    out = result + [2]
    return _until_end(out + [0] * (n - len(out)))


def ref_compute_sqrt(s):
    value = int("".join(map(str, s)), 2)
    lo, hi = 0, value + 1  # bisection for floor(sqrt(value))
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if mid * mid <= value:
            lo = mid
        else:
            hi = mid
    width = (len(s) + 1) // 2
    return _full([int(c) for c in format(lo, "b").zfill(width)])


def ref_bucket_sort(s):
    counts = [s.count(v) for v in range(5)]
    return _full([v for v in range(5) for _ in range(counts[v])])


REFERENCES = {
    "even_pairs": ref_even_pairs,
    "modular_arithmetic": ref_modular_arithmetic,
    "parity_check": ref_parity_check,
    "cycle_navigation": ref_cycle_navigation,
    "stack_manipulation": ref_stack_manipulation,
    "reverse_string": ref_reverse_string,
    "modular_arithmetic_brackets": ref_modular_arithmetic_brackets,
    "solve_equation": ref_solve_equation,
    "duplicate_string": ref_duplicate_string,
    "missing_duplicate_string": ref_missing_duplicate_string,
    "odds_first": ref_odds_first,
    "binary_addition": ref_binary_addition,
    "binary_multiplication": ref_binary_multiplication,
    "compute_sqrt": ref_compute_sqrt,
    "bucket_sort": ref_bucket_sort,
}

# name: (level, input vocab, output classes, output length(n), permutation invariant, in DAPE's table)
TASK_TABLE = {
    "even_pairs": ("R", 2, 2, lambda n: 1, False, True),
    "modular_arithmetic": ("R", 9, 5, lambda n: 1, False, True),
    "parity_check": ("R", 2, 2, lambda n: 1, True, True),
    "cycle_navigation": ("R", 3, 5, lambda n: 1, True, True),
    "stack_manipulation": ("DCF", 5, 3, lambda n: n + 1, False, True),
    "reverse_string": ("DCF", 2, 2, lambda n: n, False, True),
    "modular_arithmetic_brackets": ("DCF", 11, 5, lambda n: 1, False, True),
    "solve_equation": ("DCF", 11, 5, lambda n: 1, False, True),
    "duplicate_string": ("CS", 2, 2, lambda n: 2 * n, False, True),
    "missing_duplicate_string": ("CS", 4, 2, lambda n: 1, False, True),
    "odds_first": ("CS", 2, 2, lambda n: n, False, True),
    "binary_addition": ("CS", 3, 3, lambda n: n + 1, False, True),
    # N, not the papers' table's 2N: both public code bases use N (the product has <= N-1 digits + the end class).
    "binary_multiplication": ("CS", 3, 3, lambda n: n, False, False),
    "compute_sqrt": ("CS", 2, 2, lambda n: math.ceil(n / 2), False, True),
    "bucket_sort": ("CS", 5, 5, lambda n: n, True, True),
}

TERMINATED = {"stack_manipulation", "binary_addition", "binary_multiplication"}


def _encode(text, chars):
    inverse = {c: t for t, c in chars.items()}
    return [int(c) if c.isdigit() else inverse[c] for c in text]


def _check_against_reference(name, inputs, targets, mask):
    ref = REFERENCES[name]
    for row_in, row_t, row_m in zip(inputs.tolist(), targets.tolist(), mask.tolist()):
        want_t, want_m = ref(row_in)
        assert row_t == want_t, (name, row_in)
        assert row_m == want_m, (name, row_in)


# ------------------------------------------------------------------------------------ registry, spec


def test_registry_matches_spec_table():
    assert set(TASKS) == set(TASK_TABLE) and len(TASKS) == 15
    for name, (level, vocab, classes, out_len, perm, in_table) in TASK_TABLE.items():
        task = TASKS[name]
        assert task.name == name
        assert task.level == level
        assert task.input_vocab_size == vocab
        assert task.output_classes == classes
        assert task.permutation_invariant is perm
        assert task.in_dape_table is in_table
        assert task.termination_class == (2 if name in TERMINATED else None)
        assert task.placeholder_id == vocab and task.model_vocab_size == vocab + 1
        for n in list(range(1, 61)) + [499, 500]:
            assert task.output_length(n) == out_len(n), (name, n)
    assert sum(t.in_dape_table for t in TASKS.values()) == 14
    assert sum(not t.permutation_invariant and t.in_dape_table for t in TASKS.values()) == 11


def test_length_constants():
    assert TRAIN_MAX_LENGTH == 40
    assert TEST_LENGTHS == range(41, 501)
    lengths = train_lengths(np.random.default_rng(0), 4000)
    assert lengths.dtype == np.int64 and lengths.shape == (4000,)
    assert lengths.min() == 1 and lengths.max() == 40
    assert len(np.unique(lengths)) == 40
    assert np.array_equal(lengths, train_lengths(np.random.default_rng(0), 4000))


# ------------------------------------------------------------------------------------ hand-made cases

HAND_CASES = [
    ("parity_check", [1, 0, 1, 0, 1, 0, 0], [1]),
    ("parity_check", [0, 1, 1, 1, 1], [0]),
    ("even_pairs", [0, 0, 1, 1, 1, 0], [0]),  # one '01', one '10'
    ("even_pairs", [0, 1, 0, 1, 0, 0, 1], [1]),  # three '01', two '10'
    ("cycle_navigation", [2, 0, 1, 0, 0], [3]),  # +1 -1 0 -1 -1 = -2 = 3 (mod 5)
    ("cycle_navigation", [2, 2, 2, 0], [2]),
    ("modular_arithmetic", _encode("1+2*3", ARITH_CHARS), [2]),
    ("modular_arithmetic", _encode("1-1-1", ARITH_CHARS), [4]),
    ("modular_arithmetic", _encode("0*1+4*3-2", ARITH_CHARS), [0]),
    ("modular_arithmetic", _encode("4-3*2*2+1", ARITH_CHARS), [3]),  # 4 - 12 + 1 = -7
    ("stack_manipulation", [0, 1, 1, 0, 4, 2, 2], [1, 1, 0, 2, 0, 0, 0, 0]),  # 0110 PUSH1 POP POP
    ("stack_manipulation", [1, 1, 0, 2, 2, 2], [2, 0, 0, 0, 0, 0, 0]),  # empty final stack
    ("stack_manipulation", [1, 2, 2, 3, 4], [1, 0, 2, 0, 0, 0]),  # POP on empty is ignored
    ("stack_manipulation", [1], [1, 2]),
    ("reverse_string", [0, 1, 1, 0, 1, 0], [0, 1, 0, 1, 1, 0]),
    ("modular_arithmetic_brackets", _encode("((1+2)*(3-4))", BRACKET_CHARS), [2]),  # 3 * -1
    ("modular_arithmetic_brackets", _encode("((-2)*3)", BRACKET_CHARS), [4]),  # -6
    ("modular_arithmetic_brackets", _encode("(4--3)", BRACKET_CHARS), [2]),  # 7
    ("modular_arithmetic_brackets", _encode("-3", BRACKET_CHARS), [2]),
    ("solve_equation", _encode("(x+3)=1", EQUATION_CHARS), [3]),
    ("solve_equation", _encode("(4-(x+1))=0", EQUATION_CHARS), [3]),
    ("solve_equation", _encode("((-x)-2)=1", EQUATION_CHARS), [2]),  # -x = 3
    ("solve_equation", [0, 0], [0]),  # the original's degenerate n < 3
    ("duplicate_string", [1, 0, 1], [1, 0, 1, 1, 0, 1]),
    ("missing_duplicate_string", [0, 1, 1, 0, 0, 2, 1, 0], [1]),
    ("missing_duplicate_string", [1, 0, 1, 1, 2, 1, 3], [0]),
    ("missing_duplicate_string", [2, 1, 0, 1, 3], [0]),
    ("odds_first", [0, 0, 1, 1, 0, 1, 0, 1], [0, 1, 1, 1, 0, 1, 0, 0]),
    ("odds_first", [1, 1, 0], [1, 1, 0]),
    # 001 + 01101 (LE) = 4 + 22 = 26 = 01011 (LE), end, zeros to n + 1 = 10
    ("binary_addition", [0, 0, 1, 2, 0, 1, 1, 0, 1], [0, 1, 0, 1, 1, 2, 0, 0, 0, 0]),
    # 1001 + 000001 = 9 + 32 = 41 = 100101 (LE)
    ("binary_addition", [1, 0, 0, 1, 2, 0, 0, 0, 0, 0, 1], [1, 0, 0, 1, 0, 1, 2, 0, 0, 0, 0, 0]),
    ("binary_addition", [1, 1, 2, 1], [0, 0, 1, 2, 0]),  # 3 + 1 = 4
    ("binary_addition", [0, 1], [0, 1, 2]),  # degenerate n <= 2: the number itself (2)
    # 001 * 01101 = 4 * 22 = 88 = 0001101 (LE), end, zeros to n = 9
    ("binary_multiplication", [0, 0, 1, 2, 0, 1, 1, 0, 1], [0, 0, 0, 1, 1, 0, 1, 2, 0]),
    # 1001 * 000001 = 9 * 32 = 288 = 000001001 (LE)
    ("binary_multiplication", [1, 0, 0, 1, 2, 0, 0, 0, 0, 0, 1], [0, 0, 0, 0, 0, 1, 0, 0, 1, 2, 0]),
    ("binary_multiplication", [0], [2]),  # degenerate n == 1
    ("compute_sqrt", [1, 0, 0, 1, 0, 1], [1, 1, 0]),  # floor(sqrt(37)) = 6
    ("compute_sqrt", [1, 1, 1], [1, 0]),  # floor(sqrt(7)) = 2
    ("compute_sqrt", [0, 0, 0, 1, 0, 0, 0, 0], [0, 1, 0, 0]),  # sqrt(16) = 4
    ("compute_sqrt", [1] * 10, [1, 1, 1, 1, 1]),  # floor(sqrt(1023)) = 31
    ("bucket_sort", [1, 0, 2, 0, 4, 1, 1, 2], [0, 0, 1, 1, 1, 2, 2, 4]),
]


@pytest.mark.parametrize("name,inputs,expected", HAND_CASES)
def test_hand_made_cases(name, inputs, expected):
    task = TASKS[name]
    assert len(expected) == task.output_length(len(inputs))
    ref_targets, ref_mask = REFERENCES[name](list(inputs))
    assert ref_targets == expected  # the reference is right ...
    targets, mask = task.label(np.array([inputs]))
    assert targets.tolist() == [expected]  # ... and so is the library
    assert mask.tolist() == [ref_mask]
    if name in TERMINATED:
        assert ref_mask == [i <= expected.index(2) for i in range(len(expected))]
    else:
        assert all(ref_mask)


# ------------------------------------------------------------------------------------ random samples

LENGTHS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 16, 23, 40, 41, 64]


def _check_structure(name, row):
    """The input string has the form the original's sampler produces."""
    n = len(row)
    if name == "modular_arithmetic":
        assert all(t < 5 for t in row[::2]) and all(t in (5, 6, 7) for t in row[1::2])
    elif name == "stack_manipulation" and n > 1:
        split = next(i for i, t in enumerate(row) if t >= 2)
        assert 1 <= split <= n - 1 and all(t >= 2 for t in row[split:])
    elif name == "modular_arithmetic_brackets" and n >= 5:
        assert row[0] == 8 and row[-1] == 9
    elif name == "solve_equation" and n >= 3:
        assert row.count(9) == 1 and row[-2] == 10 and row.count(10) == 1 and 7 not in row[-2:]
    elif name == "missing_duplicate_string" and n > 1:
        assert row.count(2) == 1 and row.count(3) == n % 2 and (n % 2 == 0 or row[-1] == 3)
    elif name in ("binary_addition", "binary_multiplication") and n >= 3:
        assert row.count(2) == 1
        i = row.index(2)
        assert 1 <= i <= n - 2 and any(row[:i]) and any(row[i + 1:])
    elif name == "compute_sqrt":
        assert any(row)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_random_samples_match_reference(name):
    task = TASKS[name]
    rng = np.random.default_rng(1234)
    for length in LENGTHS:
        batch = task.sample(rng, length, 8)
        n = task.input_length(length)
        out_len = task.output_length(n)
        assert batch.inputs.dtype == np.int64 and batch.targets.dtype == np.int64
        assert batch.target_mask.dtype == bool
        assert batch.inputs.shape == (8, n)
        assert batch.targets.shape == batch.target_mask.shape == (8, out_len)
        assert batch.inputs.min() >= 0 and batch.inputs.max() < task.input_vocab_size
        assert batch.targets.min() >= 0 and batch.targets.max() < task.output_classes
        for row in batch.inputs.tolist():
            _check_structure(name, row)
        _check_against_reference(name, batch.inputs, batch.targets, batch.target_mask)
        targets, mask = task.label(batch.inputs)  # the library's own labeller agrees too
        assert np.array_equal(targets, batch.targets) and np.array_equal(mask, batch.target_mask)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_long_test_length_matches_reference(name):
    task = TASKS[name]
    for length in (TEST_LENGTHS[0], TEST_LENGTHS[-1]):
        batch = task.sample(np.random.default_rng(7), length, 3)
        assert batch.inputs.shape == (3, task.input_length(length))
        _check_against_reference(name, batch.inputs, batch.targets, batch.target_mask)


def test_modular_arithmetic_odd_lengths_only():
    task = TASKS["modular_arithmetic"]
    rng = np.random.default_rng(0)
    for length in range(1, 30):
        expected = length if length % 2 else length - 1
        assert task.input_length(length) == expected
        assert task.sample(rng, length, 2).inputs.shape == (2, expected)


def test_operator_sets():
    brackets = TASKS["modular_arithmetic_brackets"].sample(np.random.default_rng(0), 40, 64).inputs
    assert (brackets == 7).any()  # '*' is used (mult=True, as in the experiment configs)
    assert not (brackets == 10).any()  # the reserved id never appears
    equations = TASKS["solve_equation"].sample(np.random.default_rng(0), 40, 64).inputs
    assert set(np.unique(equations).tolist()) <= set(range(11))
    labels = TASKS["parity_check"].sample(np.random.default_rng(0), 20, 512).targets
    assert 0.4 < labels.mean() < 0.6


def test_termination_masks_are_prefixes():
    rng = np.random.default_rng(3)
    for name in TERMINATED:
        batch = TASKS[name].sample(rng, 30, 32)
        for t, m in zip(batch.targets.tolist(), batch.target_mask.tolist()):
            end = t.index(2)
            assert m == [i <= end for i in range(len(t))]
            assert all(v == 0 for v in t[end + 1:])  # padding after the end class is 0
        assert not batch.target_mask.all()  # some positions really are masked


# ------------------------------------------------------------------------------------ determinism


@pytest.mark.parametrize("name", sorted(TASKS))
def test_determinism(name):
    task = TASKS[name]
    a = task.sample(np.random.default_rng(11), 20, 16)
    b = task.sample(np.random.default_rng(11), 20, 16)
    c = task.sample(np.random.default_rng(12), 20, 16)
    for field in ("inputs", "targets", "target_mask"):
        assert np.array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.inputs, c.inputs)


def test_bad_arguments():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError):
        TASKS["parity_check"].sample(rng, 0, 4)
    with pytest.raises(ValueError):
        TASKS["parity_check"].sample(rng, 5, 0)


# ------------------------------------------------------------------------------------ encoder batches


@pytest.mark.parametrize("name", sorted(TASKS))
def test_make_encoder_batch(name):
    task = TASKS[name]
    enc = make_encoder_batch(task, np.random.default_rng(5), 13, 4)
    plain = task.sample(np.random.default_rng(5), 13, 4)
    n = plain.inputs.shape[1]
    out_len = task.output_length(n)
    assert enc.input_length == n
    assert enc.tokens.shape == (4, n + out_len) and enc.tokens.dtype == np.int64
    assert np.array_equal(enc.tokens[:, :n], plain.inputs)
    assert (enc.tokens[:, n:] == task.input_vocab_size).all()
    assert enc.tokens.max() < task.model_vocab_size
    assert np.array_equal(enc.output_positions, np.arange(n, n + out_len))
    assert np.array_equal(enc.targets, plain.targets)
    assert np.array_equal(enc.target_mask, plain.target_mask)


def test_make_encoder_batch_by_name():
    enc = make_encoder_batch("reverse_string", np.random.default_rng(0), 5, 2)
    assert enc.tokens.shape == (2, 10)
    assert np.array_equal(enc.targets, enc.tokens[:, :5][:, ::-1])


# ------------------------------------------------------------------------------------ associative recall


def ref_recall(row, pairs):
    table = {}
    for i in range(pairs):
        assert row[2 * i] not in table  # keys are distinct
        table[row[2 * i]] = row[2 * i + 1]
    return table


def test_recall_encoder_form():
    task = AssociativeRecall(num_keys=64, num_values=8)
    assert RECALL_TASKS["associative_recall"].input_vocab_size == 256 + 32
    assert task.input_vocab_size == 72 and task.output_classes == 8 and not task.in_dape_table
    rng = np.random.default_rng(0)
    for length in (3, 4, 5, 6, 10, 40, 41, 100):
        batch = task.sample(rng, length, 6)
        pairs, queries = length // 3, length - 2 * (length // 3)
        assert task.output_length(length) == queries
        assert batch.inputs.shape == (6, length) and batch.targets.shape == (6, queries)
        assert batch.target_mask.all()
        for row, tgt in zip(batch.inputs.tolist(), batch.targets.tolist()):
            table = ref_recall(row, pairs)
            assert all(k < 64 for k in table) and all(64 <= v < 72 for v in table.values())
            query_keys = row[2 * pairs:]
            assert tgt == [table[q] - 64 for q in query_keys]
            assert len(set(query_keys)) == min(pairs, queries)  # distinct while possible
        assert np.array_equal(task.label(batch.inputs)[0], batch.targets)
    enc = make_encoder_batch(task, np.random.default_rng(1), 40, 2)
    assert enc.tokens.shape == (2, 40 + 14) and (enc.tokens[:, 40:] == 72).all()
    with pytest.raises(ValueError):
        task.sample(rng, 2, 1)
    with pytest.raises(ValueError):
        task.sample(rng, 3 * 65, 1)  # 65 distinct keys needed


def test_recall_causal_form():
    task = AssociativeRecall(num_keys=64, num_values=8)
    rng = np.random.default_rng(0)
    for length in (4, 5, 6, 7, 32, 33, 64, 200):
        batch = task.sample_causal(rng, length, 5)
        slots = (length + 1) // 2
        pairs = (slots + 1) // 2
        queries = slots - pairs
        assert task.causal_counts(length) == (pairs, queries)
        assert batch.tokens.shape == batch.targets.shape == batch.loss_mask.shape == (5, length)
        assert np.array_equal(batch.tokens[:, 1:], batch.targets[:, :-1])  # next-token targets
        assert batch.loss_mask.sum(axis=1).tolist() == [queries] * 5
        for tok, tgt, msk in zip(batch.tokens.tolist(), batch.targets.tolist(), batch.loss_mask.tolist()):
            table = ref_recall(tok, pairs)
            positions = [i for i, m in enumerate(msk) if m]
            assert positions == list(range(2 * pairs, 2 * pairs + 2 * queries, 2))
            assert [tgt[i] for i in positions] == [table[tok[i]] for i in positions]
            assert len({tok[i] for i in positions}) == queries  # distinct queried keys
            assert all(t in table for t in tok[2 * pairs::2])  # every query is a known key
    a = task.sample_causal(np.random.default_rng(9), 50, 4)
    b = task.sample_causal(np.random.default_rng(9), 50, 4)
    c = task.sample_causal(np.random.default_rng(10), 50, 4)
    assert np.array_equal(a.tokens, b.tokens) and not np.array_equal(a.tokens, c.tokens)
    with pytest.raises(ValueError):
        task.sample_causal(rng, 3, 1)

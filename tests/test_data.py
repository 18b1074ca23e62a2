"""The embedded corpus: deterministic document split, whole documents, honest evaluation windows."""

import numpy as np
import pytest

from dape_core.data import DOC_SEPARATOR, DataConfig, TrainStream, evaluation_windows, load_corpus


@pytest.fixture(scope="module")
def corpus():
    return load_corpus(DataConfig(max_files=200))


def test_split_is_deterministic_and_disjoint(corpus):
    again = load_corpus(DataConfig(max_files=200))
    assert again.content_hash == corpus.content_hash
    assert [len(d) for d in again.validation] == [len(d) for d in corpus.validation]
    train_docs = {d.tobytes() for d in corpus.train}
    assert not any(d.tobytes() in train_docs for d in corpus.validation)
    other = load_corpus(DataConfig(max_files=200, split_seed=1))
    assert [len(d) for d in other.validation] != [len(d) for d in corpus.validation]


def test_corpus_is_real_python_source(corpus):
    text = b"".join(d.tobytes() for d in corpus.train[:50]).decode("utf-8", errors="replace")
    assert "def " in text and "import " in text
    assert all(DOC_SEPARATOR not in d for d in corpus.train)


def test_evaluation_windows_share_their_tail_and_come_from_long_documents(corpus):
    windows = evaluation_windows(corpus.validation, [32, 64, 128], n_windows=10, seed=0)
    assert {length: w.shape for length, w in windows.items()} == {32: (10, 33), 64: (10, 65), 128: (10, 129)}
    # Every length scores the same tail tokens: only the context before them grows.
    assert np.array_equal(windows[32].numpy(), windows[128][:, -33:].numpy())
    validation_bytes = [d.tobytes() for d in corpus.validation]
    for row in windows[128]:
        assert any(row.numpy().astype(np.uint8).tobytes() in doc for doc in validation_bytes)


def test_evaluation_length_longer_than_every_document_is_a_clear_error(corpus):
    with pytest.raises(ValueError, match="no held-out document"):
        evaluation_windows(corpus.validation, [10_000_000], n_windows=4, seed=0)


def test_train_stream_is_seeded(corpus):
    a = TrainStream(corpus.train, seed=3).batch(4, 16)
    b = TrainStream(corpus.train, seed=3).batch(4, 16)
    c = TrainStream(corpus.train, seed=4).batch(4, 16)
    assert all((x == y).all() for x, y in zip(a, b))
    assert not (a[0] == c[0]).all()
    assert (a[0][:, 1:] == a[1][:, :-1]).all()  # targets are the inputs shifted by one

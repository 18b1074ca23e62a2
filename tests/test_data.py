"""Data: the embedded corpus, text files, memory-mapped token files, saved HF datasets, tokenizers, splits,
evaluation windows, and bad data reported clearly before any training."""

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import planted_duplicates
import pytest
from pydantic import ValidationError

from dape_core import ExperimentConfig, run_experiment
from dape_core.data import (
    DOC_SEPARATOR,
    DataConfig,
    TrainStream,
    evaluation_windows,
    load_corpus,
    load_tokenizer,
    snapshot,
    snapshot_documents,
)
from dape_core.data.corpus import _stdlib_corpus


@pytest.fixture(scope="module")
def corpus():
    return load_corpus(DataConfig(max_files=200))


@pytest.fixture(scope="module")
def bpe_json(tmp_path_factory):
    """A real byte-level BPE tokenizer.json, trained here on stdlib source (nothing is downloaded)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator([text.decode(errors="replace") for _, text in snapshot_documents(40)], trainer)
    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def _write_texts(folder, texts: dict[str, str]):
    for name, text in texts.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


# The embedded corpus ---------------------------------------------------------------------------------------

def test_the_stdlib_corpus_is_read_once_per_process_and_handed_out_as_copies(monkeypatch):
    """A worker's trials read the same stdlib: the second load reads no file (issue 45: about a second a
    trial), gives the same tokens, read-only, and its own record (a trial that adds to it changes no other)."""
    import dape_core.data.corpus as corpus_module

    _stdlib_corpus.cache_clear()
    read = []
    real = corpus_module.read_documents
    monkeypatch.setattr(corpus_module, "read_documents", lambda cfg: read.append(cfg) or real(cfg))
    first = load_corpus(DataConfig(max_files=30))
    first.record["added by a trial"] = True
    second = load_corpus(DataConfig(max_files=30))
    assert len(read) == 1
    assert second.tokens is first.tokens and not second.tokens.flags.writeable
    assert second.content_hash == first.content_hash and "added by a trial" not in second.record
    assert second.documents == first.documents and second.documents is not first.documents
    load_corpus(DataConfig(max_files=31))  # another config is read
    assert len(read) == 2


def test_the_pinned_hash_is_the_shipped_archives_and_its_licence_ships_beside_it():
    """Issue 53: `source: stdlib` is a fixed snapshot shipped with the package (CPython 3.11.7's library), not
    the running interpreter's: the archive is the pinned one, holds what the docs say, keys in sorted order."""
    assert hashlib.sha256(snapshot.SNAPSHOT.read_bytes()).hexdigest() == snapshot.SNAPSHOT_SHA256
    licence = (snapshot.EMBEDDED / "LICENSE-cpython-3.11.7.txt").read_text()
    assert "PYTHON SOFTWARE FOUNDATION LICENSE VERSION 2" in licence
    documents = snapshot_documents()
    keys = [key for key, _ in documents]
    assert keys == sorted(set(keys)) and all(key.endswith(".py") and "site-packages" not in key for key in keys)
    assert (len(documents), sum(len(text) for _, text in documents)) == (snapshot.SNAPSHOT_FILES,
                                                                         snapshot.SNAPSHOT_BYTES)
    assert snapshot_documents(3) == documents[:3]


def test_a_damaged_or_missing_snapshot_is_refused_naming_the_file_and_both_hashes(tmp_path, monkeypatch):
    damaged = tmp_path / snapshot.SNAPSHOT.name
    blob = bytearray(snapshot.SNAPSHOT.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    damaged.write_bytes(bytes(blob))
    actual = hashlib.sha256(blob).hexdigest()
    with pytest.raises(snapshot.SnapshotMismatch) as refused:
        snapshot_documents(path=damaged)
    assert str(damaged) in str(refused.value) and actual in str(refused.value)
    assert snapshot.SNAPSHOT_SHA256 in str(refused.value)
    # Through load_corpus: the fault injected by pointing the module at the damaged copy.
    monkeypatch.setattr(snapshot, "SNAPSHOT", damaged)
    _stdlib_corpus.cache_clear()
    with pytest.raises(snapshot.SnapshotMismatch, match="damaged or was edited"):
        load_corpus(DataConfig(max_files=3))
    monkeypatch.setattr(snapshot, "SNAPSHOT", tmp_path / "absent.tar.gz")
    with pytest.raises(FileNotFoundError, match="absent.tar.gz is missing"):
        load_corpus(DataConfig(max_files=3))
    _stdlib_corpus.cache_clear()


def test_the_default_corpus_is_the_same_bytes_whatever_python_runs_it():
    """Run in a process whose `sysconfig` names another (empty) standard library: the default corpus keeps
    its content hash, the one the `stdlib` source gave on Python 3.11.7 before it was a snapshot, and its
    record (issue 53: Debian's 3.11.2 trained on other text)."""
    script = textwrap.dedent("""
        import json, sysconfig
        real = sysconfig.get_paths
        sysconfig.get_paths = lambda *a, **k: {**real(*a, **k), "stdlib": "/nonexistent/lib/python3.99"}
        from dape_core.data import DataConfig, load_corpus
        corpus = load_corpus(DataConfig())
        print(json.dumps([corpus.content_hash, corpus.record["documents"], corpus.record["tokens"]]))
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == ["f5bdc01ad41baafc", {"train": 1592, "validation": 170, "test": 0},
                                      {"train": 28230744, "validation": 3294480, "test": 0}]
    data_package = Path(snapshot.__file__).parent
    assert not [path.name for path in data_package.glob("*.py") if "sysconfig" in path.read_text()]


def test_the_snapshot_builder_is_deterministic_and_reads_python_files_only(tmp_path, monkeypatch):
    root = tmp_path / "lib"
    for name, text in {"b.py": "b = 2\n", "a/z.py": "z = 1\n", "a/__init__.py": "", "notes.txt": "no",
                       "site-packages/pkg.py": "no = 1\n"}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    first = snapshot.build_snapshot(root, tmp_path / "one.tar.gz")
    os.utime(root / "b.py", (0, 12345))  # a timestamp is not part of the archive
    assert snapshot.build_snapshot(root, tmp_path / "two.tar.gz") == first
    monkeypatch.setattr(snapshot, "SNAPSHOT_SHA256", first)  # this archive in place of the pinned one
    documents = snapshot_documents(path=tmp_path / "one.tar.gz")
    assert documents == [("a/__init__.py", b""), ("a/z.py", b"z = 1\n"), ("b.py", b"b = 2\n")]


def test_split_is_deterministic_and_disjoint(corpus):
    _stdlib_corpus.cache_clear()  # read again, not the process's kept copy
    again = load_corpus(DataConfig(max_files=200))
    assert again.content_hash == corpus.content_hash
    assert [len(d) for d in again.validation] == [len(d) for d in corpus.validation]
    train_docs = {d.tobytes() for d in corpus.train}
    assert not any(d.tobytes() in train_docs for d in corpus.validation)
    other = load_corpus(DataConfig(max_files=200, split_seed=1))
    assert [len(d) for d in other.validation] != [len(d) for d in corpus.validation]
    assert corpus.record["documents"]["validation"] == len(corpus.validation) > 0
    assert corpus.record["tokens"]["train"] == corpus.train_tokens


def test_test_split_is_held_out_and_recorded():
    split = load_corpus(DataConfig(max_files=200, val_fraction=0.1, test_fraction=0.1))
    names = [{d.tobytes() for d in docs} for docs in (split.train, split.validation, split.test)]
    assert all(names) and not (names[0] & names[1]) and not (names[0] & names[2]) and not (names[1] & names[2])
    assert split.record["documents"] == {"train": len(split.train), "validation": len(split.validation),
                                         "test": len(split.test)}
    # The validation documents are those of the two-way split: adding a test split only takes from train.
    plain = load_corpus(DataConfig(max_files=200, val_fraction=0.1))
    assert names[1] == {d.tobytes() for d in plain.validation}


def test_corpus_is_real_python_source(corpus):
    text = b"".join(d.tobytes() for d in corpus.train[:50]).decode("utf-8", errors="replace")
    assert "def " in text and "import " in text
    assert all(DOC_SEPARATOR not in d for d in corpus.train)


def test_train_stream_is_seeded_and_runs_across_documents(corpus):
    regions = corpus.stream_regions()
    assert len(regions) == 1 and (regions[0] == DOC_SEPARATOR).sum() == len(corpus.train)
    a = TrainStream(regions, 16, seed=3).batch(4)
    b = TrainStream(regions, 16, seed=3).batch(4)
    c = TrainStream(regions, 16, seed=4).batch(4)
    assert all((x == y).all() for x, y in zip(a, b))
    assert not (a[0] == c[0]).all()
    assert (a[0][:, 1:] == a[1][:, :-1]).all()  # targets are the inputs shifted by one


# Evaluation windows ----------------------------------------------------------------------------------------

def test_evaluation_windows_share_their_tail_and_come_from_long_documents(corpus):
    windows = evaluation_windows(corpus.validation, [32, 64, 128], n_windows=10, seed=0)
    assert {length: w.shape for length, w in windows.items()} == {32: (10, 33), 64: (10, 65), 128: (10, 129)}
    # Every length scores the same tail tokens: only the context before them grows.
    assert np.array_equal(windows[32].numpy(), windows[128][:, -33:].numpy())
    validation_bytes = [d.tobytes() for d in corpus.validation]
    for row in windows[128]:
        assert any(row.numpy().astype(np.uint8).tobytes() in doc for doc in validation_bytes)


def test_evaluation_budget_is_in_scored_tokens():
    from dape_core.evaluate import EvalConfig

    assert EvalConfig(lengths=[64], tail_tokens=32).windows_per_length == 64  # default 2048 scored tokens
    assert EvalConfig(lengths=[64], tail_tokens=16, tokens_per_length=1000).windows_per_length == 63
    assert EvalConfig(lengths=[64], n_windows=5).windows_per_length == 5
    with pytest.raises(ValidationError, match="not both"):
        EvalConfig(lengths=[64], n_windows=5, tokens_per_length=100)


def test_evaluation_length_longer_than_every_document_is_a_clear_error(corpus):
    with pytest.raises(ValueError, match="no held-out document"):
        evaluation_windows(corpus.validation, [10_000_000], n_windows=4, seed=0)


def test_budget_larger_than_the_held_out_text_is_a_clear_error(corpus):
    with pytest.raises(ValueError, match="only .* non-overlapping windows .* budget needs 100000"):
        evaluation_windows(corpus.validation, [256], n_windows=100_000, seed=0)


# Text files ------------------------------------------------------------------------------------------------

def test_text_folder_glob_and_separator(tmp_path):
    _write_texts(tmp_path, {"a.txt": "alpha " * 50, "sub/b.txt": "beta " * 50, "skip.md": "not me",
                            "c.txt": "one\n<|doc|>\ntwo two\n<|doc|>\nthree three three"})
    folder = load_corpus(DataConfig(source="text", path=str(tmp_path), val_fraction=0.3, split_seed=2))
    assert sum(folder.record["documents"].values()) == 3
    text = b"".join(d.tobytes() for split in ("train", "validation") for d in folder.split(split))
    assert b"alpha" in text and b"beta" in text and b"not me" not in text
    split = load_corpus(DataConfig(source="text", path=str(tmp_path), separator="<|doc|>", val_fraction=0.3))
    assert sum(split.record["documents"].values()) == 5
    globbed = load_corpus(DataConfig(source="text", path=str(tmp_path / "**" / "b.txt")))
    assert sum(globbed.record["documents"].values()) == 1
    single = load_corpus(DataConfig(source="text", path=str(tmp_path / "a.txt")))
    assert single.content_hash != folder.content_hash


def test_identical_files_under_different_names_land_in_one_split(tmp_path):
    """Issue 53: a document goes by its name's hash, so two identical files could sit one in train, one in
    validation (5 in the stdlib of Python 3.11.7). A copy now follows the first copy, in key order."""
    expected = planted_duplicates.plant(tmp_path)
    corpus = load_corpus(DataConfig(source="text", path=str(tmp_path), val_fraction=planted_duplicates.VAL_FRACTION))
    found: dict[bytes, list[str]] = {}
    for split in ("train", "validation", "test"):
        for doc in corpus.split(split):
            found.setdefault(doc.tobytes(), []).append(split)
    for content, first_split in expected.items():
        assert found[content.encode()] == [first_split] * 3
    assert all(len(set(splits)) == 1 for splits in found.values())  # nothing else repeats, nothing crosses
    assert corpus.record["duplicates_folded"] == corpus.record["duplicates_moved"] == 4
    unplanted = load_corpus(DataConfig(source="text", path=str(tmp_path / "f0*.txt"), val_fraction=0.3))
    assert unplanted.record["duplicates_folded"] == 0


def test_empty_folder_and_missing_path_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no files match"):
        load_corpus(DataConfig(source="text", path=str(tmp_path)))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_corpus(DataConfig(source="text", path=str(tmp_path / "nope")))
    with pytest.raises(ValidationError, match="data.path is required"):
        DataConfig(source="text")
    with pytest.raises(ValidationError,
                       match=r"source\n  Input should be 'stdlib', 'text', 'tokens' or 'hf_disk' "
                             r".*input_value='the_pile'"):
        DataConfig(source="the_pile")


def test_files_that_are_not_text_are_skipped_and_counted(tmp_path):
    _write_texts(tmp_path, {"a.txt": "alpha " * 50, "b.txt": "beta " * 50})
    for name in ("c.txt", "d.txt"):
        (tmp_path / name).write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00" + bytes(range(256)) * 4)
    with pytest.warns(UserWarning, match=r"skipped 2 of 4 file\(s\) .* not text"):
        corpus = load_corpus(DataConfig(source="text", path=str(tmp_path), val_fraction=0.3))
    assert sum(corpus.record["documents"].values()) == 2
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).unlink()
    with pytest.raises(ValueError, match=r"none of the 2 file\(s\) .* is text"):
        load_corpus(DataConfig(source="text", path=str(tmp_path)))


# Tokenizers ------------------------------------------------------------------------------------------------

def test_tokenizer_json_encodes_documents_with_an_end_of_text_separator(tmp_path, bpe_json):
    texts = {"a.txt": "def alpha(x):\n    return x + 1\n" * 40, "b.txt": "import os\nprint(os.sep)\n" * 40}
    _write_texts(tmp_path / "docs", texts)
    data = DataConfig(source="text", path=str(tmp_path / "docs"), tokenizer=str(bpe_json), val_fraction=0.5)
    corpus = load_corpus(data)
    tokenizer = load_tokenizer(str(bpe_json))
    assert corpus.vocab_size == tokenizer.vocab_size == 400
    assert corpus.tokens.dtype == np.uint16
    eos = tokenizer.tokenizer.token_to_id("<|endoftext|>")
    docs = corpus.train + corpus.validation
    assert sorted(tokenizer.tokenizer.decode(d.tolist()) for d in docs) == sorted(texts.values())
    assert all(eos not in d for d in docs)
    assert (corpus.tokens == eos).sum() == 2  # one separator after each document
    assert sum(map(len, docs)) < 0.75 * sum(map(len, texts.values()))  # BPE merges: fewer tokens than bytes
    assert corpus.content_hash != load_corpus(DataConfig(source="text", path=str(tmp_path / "docs"),
                                                         val_fraction=0.5)).content_hash


def test_missing_tokenizer_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no tokenizer file at .*never downloaded"):
        load_corpus(DataConfig(tokenizer=str(tmp_path / "gpt2" / "tokenizer.json"), max_files=5))
    with pytest.raises(ValidationError, match="tokenizer must be 'byte' or the path of a tokenizer.json"):
        DataConfig(tokenizer="gpt2")


# Token files -----------------------------------------------------------------------------------------------

def _token_file(tmp_path, name, ids, dtype="uint16"):
    path = tmp_path / name
    array = np.asarray(ids, dtype=dtype)
    if name.endswith(".npy"):
        np.save(path, array)
    else:
        array.tofile(path)
    return path


@pytest.mark.parametrize("name", ["stream.bin", "stream.npy"])
def test_token_file_is_memory_mapped_and_split_by_chunks(tmp_path, name):
    path = _token_file(tmp_path, name, np.arange(20_000), dtype="uint32")  # id = position: windows reveal where
    data = DataConfig(source="tokens", path=str(path), dtype="uint32", vocab_size=20_000, chunk_tokens=1000,
                      val_fraction=0.2, split_seed=5)
    corpus = load_corpus(data)
    assert isinstance(corpus.tokens, np.memmap)
    assert corpus.record["chunks"] == {"train": 16, "validation": 4, "test": 0}
    train = corpus.regions["train"]
    held_out = corpus.documents["validation"]
    assert sum(e - s for s, e in train) + sum(e - s for s, e in held_out) == 20_000
    inputs, targets = TrainStream(corpus.stream_regions(), 50, seed=0).batch(64)
    for row in inputs.numpy():
        assert any(s <= row[0] and row[0] + 51 <= e for s, e in train)  # never reaches into held-out chunks
    windows = evaluation_windows(corpus.validation, [100, 400], n_windows=8, seed=0)
    for row in windows[400].numpy():
        assert any(s <= row[0] and row[0] + 401 <= e for s, e in held_out)
    again = load_corpus(data)
    assert again.documents == corpus.documents and again.content_hash == corpus.content_hash


def test_token_file_errors_are_clear(tmp_path):
    path = _token_file(tmp_path, "bad.bin", [1, 2, 3, 500, 4] * 1000)
    with pytest.raises(ValueError, match="token id 500 at position 3 is outside the vocabulary"):
        load_corpus(DataConfig(source="tokens", path=str(path), vocab_size=300, chunk_tokens=500))
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\x01\x00\x02")
    with pytest.raises(ValueError, match="not a multiple of 2"):
        load_corpus(DataConfig(source="tokens", path=str(odd)))
    small = _token_file(tmp_path, "small.bin", [1] * 900)
    with pytest.raises(ValueError, match="too few for a train / held-out split"):
        load_corpus(DataConfig(source="tokens", path=str(small), chunk_tokens=1000))
    matrix = tmp_path / "matrix.npy"
    np.save(matrix, np.zeros((4, 4), dtype=np.uint16))
    with pytest.raises(ValueError, match="a token stream is 1-D"):
        load_corpus(DataConfig(source="tokens", path=str(matrix)))


@pytest.mark.slow
def test_a_huge_token_file_costs_no_ram(tmp_path):
    """A 512 MiB sparse token file (2^28 ids): the corpus loads, is checked and yields batches while the
    process's peak memory grows by a small fraction of the file size."""
    path = tmp_path / "huge.bin"
    with path.open("wb") as handle:
        handle.truncate(512 << 20)
    script = textwrap.dedent(f"""
        import resource
        from dape_core.data import DataConfig, TrainStream, load_corpus
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        corpus = load_corpus(DataConfig(source="tokens", path={str(path)!r}, chunk_tokens=1 << 22))
        inputs, _ = TrainStream(corpus.stream_regions(), 1024, seed=0).batch(8)
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        print(len(corpus.tokens), corpus.record["chunks"]["validation"], inputs.shape[1], grown * 1024)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True)
    tokens, held_out_chunks, width, grown = map(int, out.stdout.split())
    assert tokens == 1 << 28 and held_out_chunks == 6 and width == 1024
    assert grown < 128 << 20, f"peak RSS grew by {grown / 2**20:.0f} MiB while reading a 512 MiB token file"


# Hugging Face datasets saved to disk -----------------------------------------------------------------------

def test_hf_dataset_saved_to_disk(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [f"document {i}: " + "lorem ipsum " * (20 + i) for i in range(30)]
    datasets.Dataset.from_dict({"text": rows, "id": list(range(30))}).save_to_disk(str(tmp_path / "flat"))
    corpus = load_corpus(DataConfig(source="hf_disk", path=str(tmp_path / "flat"), val_fraction=0.2))
    docs = sorted(d.tobytes().decode() for split in ("train", "validation") for d in corpus.split(split))
    assert docs == sorted(rows)
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"body": rows})}).save_to_disk(str(tmp_path / "dict"))
    with pytest.raises(ValueError, match="data.text_field 'text' is not a column .* columns: body"):
        load_corpus(DataConfig(source="hf_disk", path=str(tmp_path / "dict"), text_field="text"))
    with pytest.raises(ValueError, match="data.hf_split 'test' is not in the dataset .* it has: train"):
        load_corpus(DataConfig(source="hf_disk", path=str(tmp_path / "dict"), text_field="body", hf_split="test"))
    assert load_corpus(DataConfig(source="hf_disk", path=str(tmp_path / "dict"), text_field="body")).train_tokens > 0


def test_hf_disk_without_the_datasets_package_names_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # injects the fault: the package is not importable
    with pytest.raises(ImportError, match="needs the Hugging Face 'datasets' package.*pip install datasets"):
        load_corpus(DataConfig(source="hf_disk", path=str(tmp_path)))


# Bad data stops a trial before training --------------------------------------------------------------------

class _Steps:
    def __init__(self):
        self.steps = []

    def on_step(self, step, loss, lr):
        self.steps.append(step)


def _tiny(**sections):
    base = {"model": {"preset": "tiny"}, "data": {"max_files": 100},
            "train": {"steps": 5, "batch_size": 4, "seq_len": 32, "log_every": 1},
            "eval": {"lengths": [32, 64], "tail_tokens": 16, "n_windows": 4, "timing": False}}
    for key, value in sections.items():
        base[key] = {**base[key], **value}
    return ExperimentConfig(**base)


def test_bad_data_fails_before_training(tmp_path, bpe_json):
    _write_texts(tmp_path / "short", {f"{i}.txt": "tiny " for i in range(20)})
    sink = _Steps()
    with pytest.raises(ValueError, match="the held-out text holds .* fewer than the 65 a window at L=64 reads"):
        run_experiment(_tiny(data={"source": "text", "path": str(tmp_path / "short"), "max_files": None}), sink)
    with pytest.raises(ValueError, match=r"model.vocab_size=256 is smaller than the data's vocabulary of 400"):
        run_experiment(_tiny(data={"tokenizer": str(bpe_json)}), sink)
    ids = _token_file(tmp_path, "ids.bin", np.arange(50_000) % 1000)
    with pytest.raises(ValueError, match="token id 256 at position 256 is outside the vocabulary"):
        run_experiment(_tiny(data={"source": "tokens", "path": str(ids), "chunk_tokens": 5000, "max_files": None}),
                       sink)
    assert sink.steps == []
    with pytest.raises(ValidationError, match="chunk_tokens=50 must exceed the longest evaluation length 64"):
        _tiny(data={"source": "tokens", "path": str(ids), "chunk_tokens": 50, "max_files": None})
    with pytest.raises(ValidationError, match="eval.split is 'test' but data.test_fraction is 0"):
        _tiny(eval={"split": "test"})

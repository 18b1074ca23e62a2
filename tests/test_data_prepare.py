"""Preparing a corpus into a token file with metadata (dape_core.data.prepare), and the `tokens` source reading
it without a scan: every input kind, the recorded split and counts against the file itself, the dtype, a
killed preparation, a changed file, and the trained BPE tokenizer."""

import fcntl
import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import planted_duplicates
import pytest
from pydantic import ValidationError

from dape_core.data import (
    DataConfig,
    PrepareConfig,
    TokenFileChanged,
    anchored,
    data_problems,
    load_corpus,
    load_tokenizer,
    prepare_corpus,
    snapshot_documents,
    verify_token_file,
)
from dape_core.data.splits import document_split
from dape_core.data.token_meta import SAMPLE_BLOCKS, SAMPLE_BYTES, metadata_path

REPO = Path(__file__).parents[1]


@pytest.fixture(scope="module")
def texts():
    """Real text: 24 standard-library modules (documents of 2-60 KB)."""
    files = [text for _, text in snapshot_documents(300) if 2_000 < len(text) < 60_000][:24]
    return {f"doc{i:02d}": text.decode("utf-8") for i, text in enumerate(files)}


def _folder(root: Path, texts: dict[str, str]) -> Path:
    for i, (name, text) in enumerate(texts.items()):
        path = root / ("sub" if i % 2 else "") / f"{name}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def _byte_documents(token_path: Path) -> list[str]:
    """Every document of a byte-level token file, whatever its split: runs between the separator (byte 0)."""
    raw = np.fromfile(token_path, dtype=np.uint16).astype(np.uint8).tobytes()
    return [part.decode("utf-8") for part in raw.split(b"\x00") if part]


def _prepare(inputs, out, **options):
    options.setdefault("workers", 2)
    return prepare_corpus(PrepareConfig(inputs=[str(i) for i in inputs], output=str(out), **options))


# Input kinds -----------------------------------------------------------------------------------------------

def _write_input(kind: str, root: Path, texts: dict[str, str]) -> tuple[list[Path | str], dict]:
    rows = list(texts.values())
    if kind == "folder":
        return [_folder(root / "corpus", texts)], {}
    if kind == "glob":
        _folder(root / "corpus", texts)
        return [str(root / "corpus" / "**" / "*.txt")], {}
    if kind == "jsonl":  # plain, gzip- and zstandard-compressed (The Pile's .jsonl.zst), a non-default field
        import zstandard

        lines = [json.dumps({"id": i, "body": text}) + "\n" for i, text in enumerate(rows)]
        (root / "a.jsonl").write_text("".join(lines[:8]), encoding="utf-8")
        with gzip.open(root / "b.jsonl.gz", "wt", encoding="utf-8") as handle:
            handle.writelines(lines[8:16])
        (root / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress("".join(lines[16:]).encode()))
        return [root / "a.jsonl", root / "b.jsonl.gz", root / "c.jsonl.zst"], {"text_field": "body"}
    if kind == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"text": rows, "n": list(range(len(rows)))}), root / "c.parquet", row_group_size=5)
        return [root / "c.parquet"], {}
    datasets = pytest.importorskip("datasets")
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": rows})}).save_to_disk(str(root / "saved"))
    return [root / "saved"], {}


@pytest.mark.parametrize("kind", ["folder", "glob", "jsonl", "parquet", "hf_disk"])
def test_every_input_kind_becomes_the_same_documents(tmp_path, texts, kind):
    inputs, options = _write_input(kind, tmp_path, texts)
    meta = _prepare(inputs, tmp_path / "out", val_fraction=0.3, **options)
    assert sorted(_byte_documents(tmp_path / "out" / "tokens.bin")) == sorted(texts.values())
    assert meta["documents"] == len(texts) and meta["text_bytes"] == sum(len(t.encode()) for t in texts.values())
    corpus = load_corpus(DataConfig(source="tokens", path=str(tmp_path / "out" / "tokens.bin"), val_fraction=0.3))
    held_out = [doc.astype(np.uint8).tobytes().decode() for doc in corpus.validation]
    assert len(held_out) == meta["split"]["validation"]["documents"] > 0
    assert set(held_out) <= set(texts.values())


def test_a_huge_file_is_cut_into_pieces_but_stays_one_document(tmp_path, texts):
    text = "".join(texts.values())
    (tmp_path / "big.txt").write_text(text, encoding="utf-8")
    (tmp_path / "small.txt").write_text("short\n", encoding="utf-8")
    meta = _prepare([tmp_path], tmp_path / "out", max_piece_bytes=4096, val_fraction=0.5)  # hundreds of pieces
    assert meta["documents"] == 2
    assert sorted(_byte_documents(tmp_path / "out" / "tokens.bin")) == sorted([text, "short\n"])


def test_a_separator_cuts_files_into_documents(tmp_path):
    (tmp_path / "a.txt").write_text("one<|doc|>two<|doc|>  <|doc|>three", encoding="utf-8")
    meta = _prepare([tmp_path / "a.txt"], tmp_path / "out", separator="<|doc|>", val_fraction=0.4)
    assert sorted(_byte_documents(tmp_path / "out" / "tokens.bin")) == ["one", "three", "two"]
    assert meta["skipped_documents"] == 1  # the blank one


# The metadata describes the file ---------------------------------------------------------------------------

def test_split_and_counts_in_the_metadata_match_the_file(tmp_path, texts):
    _folder(tmp_path / "corpus", texts)
    meta = _prepare([tmp_path / "corpus"], tmp_path / "out", val_fraction=0.25, test_fraction=0.2, split_seed=3)
    tokens = np.fromfile(tmp_path / "out" / "tokens.bin", dtype=meta["dtype"])
    assert len(tokens) == meta["tokens"] and meta["dtype"] == "uint16" and meta["vocab_size"] == 256
    assert int(tokens.max()) == meta["max_token_id"]
    layout, end = meta["split"], 0
    for split in ("train", "validation", "test"):  # contiguous, in this order, covering the file
        part = tokens[layout[split]["start"]:layout[split]["end"]]
        assert layout[split]["start"] == end and len(part) == layout[split]["tokens"]
        assert int((part == meta["eos_id"]).sum()) == layout[split]["documents"] > 0  # one separator per document
        end = layout[split]["end"]
        # each document sits in the split its key's seeded hash names: the same rule as the `text` source
        names = [f"doc{i:02d}" for i, t in enumerate(texts.values()) if t in _split_texts(part)]
        keys = [("sub/" if int(n[3:]) % 2 else "") + f"{n}.txt" for n in names]
        assert {document_split(key, 3, 0.25, 0.2) for key in keys} == {split}
    assert end == len(tokens)
    corpus = load_corpus(DataConfig(source="tokens", path=str(tmp_path / "out" / "tokens.bin"), val_fraction=0.25,
                                    test_fraction=0.2, split_seed=3))
    assert len(corpus.test) == layout["test"]["documents"] and corpus.content_hash == meta["content"]["sha256"][:16]
    for start, stop in corpus.documents["test"]:
        assert tokens[stop] == meta["eos_id"] and meta["eos_id"] not in tokens[start:stop]


def test_identical_files_land_in_one_split_as_in_the_text_source(tmp_path):
    """Issue 53: a copy of an earlier document follows it into its split, here as in `load_corpus`, also when
    the documents are cut into pieces (whose split is known only at the last one), and the BPE trainer reads
    no held-out copy."""
    from dape_core.data.inputs import expand_inputs
    from dape_core.data.prepare import _training_texts
    from dape_core.data.progress import NoProgress

    expected = planted_duplicates.plant(tmp_path / "corpus")
    val = planted_duplicates.VAL_FRACTION
    meta = _prepare([tmp_path / "corpus"], tmp_path / "out", val_fraction=val, max_piece_bytes=1024, workers=1)
    tokens = np.fromfile(tmp_path / "out" / "tokens.bin", dtype=meta["dtype"])
    layout = meta["split"]
    found = {split: [p.decode() for p in tokens[layout[split]["start"]:layout[split]["end"]].astype(np.uint8)
                     .tobytes().split(b"\x00") if p] for split in ("train", "validation", "test")}
    for content, first_split in expected.items():
        assert found[first_split].count(content) == 3
        assert all(content not in docs for split, docs in found.items() if split != first_split)
    assert layout["duplicates_folded"] == layout["duplicates_moved"] == 4
    in_memory = load_corpus(DataConfig(source="text", path=str(tmp_path / "corpus"), val_fraction=val))
    for split, docs in found.items():  # one rule: the same documents in each split
        assert sorted(docs) == sorted(d.tobytes().decode() for d in in_memory.split(split))
    read = load_corpus(DataConfig(source="tokens", path=str(tmp_path / "out" / "tokens.bin"), val_fraction=val))
    assert read.record["duplicates_folded"] == 4
    cfg = PrepareConfig(inputs=[str(tmp_path / "corpus")], val_fraction=val, max_piece_bytes=1024)
    used = {"bytes": 0, "documents": 0}
    trained_on = "".join(_training_texts(cfg, expand_inputs(cfg.inputs, None, "auto"), NoProgress(), used))
    held_out, trained = (c for c, split in sorted(expected.items(), key=lambda item: item[1] != "validation"))
    assert held_out not in trained_on and trained_on.count(trained) == 3
    assert used["documents"] == len(found["train"])


def _split_texts(part: np.ndarray) -> set[str]:
    return {p.decode() for p in part.astype(np.uint8).tobytes().split(b"\x00") if p}


def test_the_dtype_follows_the_vocabulary(tmp_path):
    """A 70 000-word vocabulary does not fit uint16: the file is uint32 and ids above 65 535 survive."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "<|endoftext|>": 1, **{f"w{i}": i for i in range(2, 70_000)}}
    word_level = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    word_level.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    word_level.save(str(tmp_path / "words.json"))
    for i in range(10):
        (tmp_path / f"{i}.txt").write_text(" ".join(f"w{69_990 - j * 1000 - i}" for j in range(50)))
    meta = _prepare([tmp_path], tmp_path / "out", tokenizer=str(tmp_path / "words.json"), val_fraction=0.3)
    assert meta["dtype"] == "uint32" and meta["max_token_id"] == 69_990 and meta["eos_token"] == "<|endoftext|>"
    tokens = np.fromfile(tmp_path / "out" / "tokens.bin", dtype=np.uint32)
    assert 69_990 in tokens and len(tokens) == 10 * 51
    data = DataConfig(source="tokens", path=str(tmp_path / "out" / "tokens.bin"), dtype="uint32",
                      tokenizer=str(tmp_path / "out" / "tokenizer.json"), val_fraction=0.3)
    assert load_corpus(data).vocab_size == 70_000


# BPE trained on the corpus ---------------------------------------------------------------------------------

def test_a_trained_bpe_round_trips_and_the_output_does_not_depend_on_the_workers(tmp_path, texts):
    _folder(tmp_path / "corpus", texts)
    meta = _prepare([tmp_path / "corpus"], tmp_path / "bpe", train_tokenizer=600, val_fraction=0.3)
    tokenizer_json = tmp_path / "bpe" / "tokenizer.json"
    assert meta["tokenizer"]["kind"] == "trained_bpe" and meta["vocab_size"] == 600 and meta["dtype"] == "uint16"
    assert meta["tokenizer"]["trained_on_bytes"] == sum(len(t.encode()) for k, t in texts.items()
                                                        if _key_split(k, 0.3) == "train")
    tokenizer = load_tokenizer(str(tokenizer_json))
    sample = "déjà vu — naïve 東京 🚀 tabs\tand\nnewlines  "
    assert tokenizer.tokenizer.decode(tokenizer.encode(sample.encode()).tolist()) == sample
    corpus = load_corpus(DataConfig(source="tokens", path=str(tmp_path / "bpe" / "tokens.bin"),
                                    tokenizer=str(tokenizer_json), val_fraction=0.3))
    decoded = {tokenizer.tokenizer.decode(doc.tolist()) for doc in corpus.validation}
    assert decoded and decoded <= set(texts.values())
    assert len(np.fromfile(tmp_path / "bpe" / "tokens.bin", np.uint16)) < 0.6 * meta["text_bytes"]  # it compresses
    one_worker = _prepare([tmp_path / "corpus"], tmp_path / "w1", tokenizer=str(tokenizer_json), val_fraction=0.3,
                          workers=1, batch_bytes=10_000)
    assert one_worker["content"]["sha256"] == meta["content"]["sha256"]  # 2 workers, 1 MiB batches before


def _key_split(name: str, val_fraction: float) -> str:
    key = ("sub/" if int(name[3:]) % 2 else "") + f"{name}.txt"
    return document_split(key, 0, val_fraction, 0.0)


# The tokens source reads the metadata ----------------------------------------------------------------------

@pytest.fixture
def prepared(tmp_path, texts):
    """A byte-level file of 16 MiB, four times what a trial's check reads (64 blocks of 64 KiB)."""
    body = "".join(texts.values())
    folder = tmp_path / "corpus"
    folder.mkdir()
    for i in range(40):
        (folder / f"{i:02d}.txt").write_text(body[: 200_000] + str(i), encoding="utf-8")
    _prepare([folder], tmp_path / "out", val_fraction=0.2)
    return tmp_path / "out" / "tokens.bin"


def test_the_tokens_source_uses_the_metadata_without_scanning(prepared, monkeypatch):
    import dape_core.data.corpus as corpus_module

    def scan(*args, **kwargs):
        raise AssertionError("the token file was scanned")

    monkeypatch.setattr(corpus_module, "check_token_ids", scan)
    data = DataConfig(source="tokens", path=str(prepared), val_fraction=0.2)
    corpus = load_corpus(data)
    assert corpus.record["metadata"] == "tokens.meta.json" and len(corpus.validation) > 0
    assert prepared.stat().st_size > 12 << 20
    # ... and it reads a fraction of the file: what the kernel counts as read by this process
    script = textwrap.dedent(f"""
        from dape_core.data import DataConfig, load_corpus
        def rchar():
            return int(next(l for l in open('/proc/self/io') if l.startswith('rchar')).split()[1])
        load_corpus(DataConfig(source="tokens", path={str(prepared)!r}, val_fraction=0.2))  # imports, warm-up
        before = rchar()
        load_corpus(DataConfig(source="tokens", path={str(prepared)!r}, val_fraction=0.2))
        print(rchar() - before)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert int(out.stdout) < SAMPLE_BLOCKS * SAMPLE_BYTES + (1 << 20) < prepared.stat().st_size // 3
    # without the metadata the same file is scanned, as before (the patched scan fires), with a note
    metadata_path(prepared).rename(prepared.with_name("moved.json"))
    with pytest.warns(UserWarning, match="has no metadata"), pytest.raises(AssertionError, match="was scanned"):
        load_corpus(data)


def test_a_changed_token_file_is_a_clear_error_before_training(prepared):
    data = DataConfig(source="tokens", path=str(prepared), val_fraction=0.2)
    with prepared.open("r+b") as handle:  # the first block is always sampled
        handle.seek(10)
        handle.write(b"\x07\x00")
    with pytest.raises(TokenFileChanged, match="changed since it was prepared: the hash of 64 sampled blocks"):
        load_corpus(data)
    with prepared.open("r+b") as handle:
        handle.truncate(prepared.stat().st_size - 2)
    with pytest.raises(TokenFileChanged, match=r"holds \d+ bytes, its metadata says \d+"):
        load_corpus(data)


def test_an_edit_between_sampled_blocks_passes_the_quick_check_not_the_full_one(prepared):
    meta = json.loads(metadata_path(prepared).read_text())
    size = prepared.stat().st_size
    between = (size - SAMPLE_BYTES) // (SAMPLE_BLOCKS - 1) // 2 + SAMPLE_BYTES  # after block 0, before block 1
    with prepared.open("r+b") as handle:
        handle.seek(between)
        handle.write(b"\x07\x00")
    os.utime(prepared, ns=(meta["content"]["mtime_ns"], meta["content"]["mtime_ns"]))
    load_corpus(DataConfig(source="tokens", path=str(prepared), val_fraction=0.2))  # the documented blind spot
    with pytest.raises(TokenFileChanged, match="its sha256 differs"):
        verify_token_file(prepared, full=True)


def test_a_copied_file_with_a_new_mtime_loads_with_a_note(prepared):
    os.utime(prepared, (time.time() + 100, time.time() + 100))
    with pytest.warns(UserWarning, match="modified time differs"):
        load_corpus(DataConfig(source="tokens", path=str(prepared), val_fraction=0.2))


def test_a_data_section_that_disagrees_with_the_file_names_every_value_to_set(prepared):
    data = DataConfig(source="tokens", path=str(prepared), dtype="uint32", split_seed=4,
                      tokenizer=str(prepared.parent / "tokenizer.json"), vocab_size=300)
    with pytest.raises(ValueError) as error:
        load_corpus(data)
    message = str(error.value)
    for expected in ("data.dtype is 'uint32' but the file holds uint16 ids: set data.dtype: uint16",
                     "data.val_fraction is 0.1 but the file was split with 0.2", "set data.split_seed: 0",
                     "data.vocab_size is 300 but the file's vocabulary has 256",
                     "the file holds byte-level ids: set data.tokenizer: byte"):
        assert expected in message


# Interrupted, concurrent, impossible -----------------------------------------------------------------------

@pytest.mark.slow
def test_a_killed_preparation_leaves_the_previous_output_intact(tmp_path, texts):
    small, big = _folder(tmp_path / "small", dict(list(texts.items())[:8])), tmp_path / "big"
    big.mkdir()
    body = "".join(texts.values())
    for i in range(12):
        (big / f"{i}.txt").write_text(body + str(i), encoding="utf-8")
    before = _prepare([small], tmp_path / "out", train_tokenizer=400, val_fraction=0.4)
    script = textwrap.dedent(f"""
        from dape_core.data import PrepareConfig, prepare_corpus
        prepare_corpus(PrepareConfig(inputs=[{str(big)!r}], output={str(tmp_path / 'out')!r},
                                     tokenizer={str(tmp_path / 'out' / 'tokenizer.json')!r}, workers=1,
                                     batch_bytes=65536))
    """)
    tokenizer_copy = (tmp_path / "out" / "tokenizer.json").read_bytes()
    proc = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(REPO)})
    partial = tmp_path / "out" / ".prepare.partial" / "train.part"
    deadline = time.monotonic() + 120
    while not (partial.exists() and partial.stat().st_size > 0) and proc.poll() is None:
        assert time.monotonic() < deadline, "the preparation never started writing"
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the preparation finished before it could be killed: enlarge it"
    assert verify_token_file(tmp_path / "out" / "tokens.bin", full=True)["content"] == before["content"]
    assert (tmp_path / "out" / "tokenizer.json").read_bytes() == tokenizer_copy
    after = _prepare([big], tmp_path / "out", tokenizer=str(tmp_path / "out" / "tokenizer.json"))  # starts clean
    assert not (tmp_path / "out" / ".prepare.partial").exists()
    assert verify_token_file(tmp_path / "out" / "tokens.bin", full=True)["documents"] == after["documents"] == 12


def test_two_preparations_into_one_folder_are_refused(tmp_path, texts):
    (tmp_path / "out").mkdir()
    with (tmp_path / "out" / ".prepare.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(RuntimeError, match="another preparation is writing to"):
            _prepare([_folder(tmp_path / "c", texts)], tmp_path / "out")


def test_an_empty_held_out_split_and_bad_options_are_clear(tmp_path):
    (tmp_path / "one.txt").write_text("a single document")
    with pytest.raises(ValueError, match="the validation split got no document .*1 non-empty documents"):
        _prepare([tmp_path / "one.txt"], tmp_path / "out")
    assert not (tmp_path / "out" / "tokens.bin").exists() and not (tmp_path / "out" / ".prepare.partial").exists()
    with pytest.raises(ValidationError) as error:
        PrepareConfig(inputs=[], tokenizer="gpt2", train_tokenizer=200, val_fraction=1.5)
    message = str(error.value)
    assert "inputs" in message and "train_tokenizer" in message and "val_fraction" in message
    with pytest.raises(ValidationError, match="either tokenizer .* or train_tokenizer"):
        PrepareConfig(inputs=["x"], tokenizer="t.json", train_tokenizer=1000)
    with pytest.raises(FileNotFoundError, match="no file matches"):
        _prepare([tmp_path / "one.txt", tmp_path], tmp_path / "out2", pattern=["**/*.md"])
    with pytest.raises(ValueError, match=r"a.jsonl:2: no text field 'text' \(the row has: body\)"):
        (tmp_path / "a.jsonl").write_text('{"text": "ok"}\n{"body": "x"}\n')
        _prepare([tmp_path / "a.jsonl"], tmp_path / "out3")


# Before launching trials ------------------------------------------------------------------------------------

def test_data_problems_are_found_without_reading_the_corpus(tmp_path, texts):
    _prepare([_folder(tmp_path / "corpus", texts)], tmp_path / "data" / "paper", train_tokenizer=300,
             val_fraction=0.3)
    relative = DataConfig(source="tokens", path="data/paper/tokens.bin", tokenizer="data/paper/tokenizer.json",
                          val_fraction=0.3)
    data = anchored(relative, tmp_path)
    assert data.path == str(tmp_path / "data/paper/tokens.bin") and anchored(data, "/elsewhere") == data
    assert data_problems(data) == []
    assert data_problems(anchored(relative, tmp_path / "nowhere")) == [
        f"data.path: no token file at {tmp_path / 'nowhere/data/paper/tokens.bin'}",
        f"data.tokenizer: no tokenizer file at {tmp_path / 'nowhere/data/paper/tokenizer.json'} "
        "(it is never downloaded)"]
    wrong = data_problems(anchored(DataConfig(source="tokens", path="data/paper/tokens.bin"), tmp_path))
    assert len(wrong) == 2 and "set data.val_fraction: 0.3" in wrong[0] and "set data.tokenizer:" in wrong[1]
    assert data_problems(DataConfig(source="text", path=str(tmp_path / "corpus" / "**" / "*.txt"))) == []
    assert data_problems(DataConfig(source="text", path=str(tmp_path / "missing"))) == [
        f"data.path: {tmp_path / 'missing'} does not exist; give the text file, folder or glob to train on"]


def test_workers_are_not_forked_from_a_process_running_other_threads():
    """Forking a process while other threads run (the session's Ray, gRPC, a progress monitor) can leave a worker
    stuck on a lock one of them held: ordered_map forks only a single-threaded process, else it starts its workers
    from a fork server, with the same results in the same order."""
    import threading

    from dape_core.data import parallel

    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        assert parallel._context().get_start_method() == "forkserver"
        results = list(parallel.ordered_map(abs, [(index, -index) for index in range(20)], 2, print, ("",)))
    finally:
        stop.set()
        other.join()
    assert results == [(index, index) for index in range(20)]

"""Prepare a corpus once: raw text -> one memory-mapped token file + metadata, so trials start in milliseconds.

    from dape_core.data.prepare import PrepareConfig, prepare_corpus
    meta = prepare_corpus(PrepareConfig(inputs=["~/corpus"], output="data/paper", train_tokenizer=50257))

Output folder (`output`, default `data/paper`, what the studies' `paper` profiles read):
- `tokens.bin`: every document's ids followed by the end-of-text token, training documents first, then
  validation, then test (uint16 when the vocabulary fits, else uint32);
- `tokens.meta.json`: tokenizer and its sha256, vocabulary, dtype, end-of-text token, largest id, token and
  document counts, the split (seeded by document key, a repeated document following the first, as the
  in-memory `text` source splits) with the count of repeated documents, the file's
  sha256 and the cheap fingerprint a trial re-checks (see `token_meta`);
- `tokens.docs.npy`: [start, end) of every held-out document (evaluation windows never cross one);
- `tokenizer.json`: the tokenizer used (a copy of the one given, or the BPE trained here).

Inputs are streamed (`inputs.read_pieces`) and tokenized by all cores in batches, in order, with a bounded
number of batches in flight, so memory does not grow with the corpus and the output does not depend on the
number of workers. Everything is written under `output/.prepare.partial/` and moved into place at the end,
metadata last: an interrupted run leaves the previous output as it was, and the next run removes its
leftovers and starts over (restart, not resume).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Iterator, Literal

import numpy as np
from pydantic import ConfigDict, Field, Strict, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from ..types import Fraction, NonEmptyStr, OpenFraction, PositiveInt, Seed
from .bpe import BYTE_ALPHABET, train_bpe
from .inputs import Source, expand_inputs, read_pieces
from .parallel import ordered_map
from .progress import NoProgress, Progress
from .splits import TEST, TRAIN, VALIDATION, DocumentSplitter, content_hasher
from .token_meta import DOCS_SUFFIX, FORMAT, META_SUFFIX, fingerprint, full_sha256, metadata_path, write_json_atomically
from .token_writer import SplitWriter
from .tokenization import load_tokenizer

DEFAULT_OUTPUT = "data/paper"
TOKEN_FILE, TOKENIZER_FILE = "tokens.bin", "tokenizer.json"
PARTIAL, LOCK = ".prepare.partial", ".prepare.lock"
UINT16_VOCABULARY = 1 << 16


@pydantic_dataclass(config=ConfigDict(extra="forbid"))
class PrepareConfig:
    """What to read, how to tokenize it, how to split it, where to write it.

    inputs: text files, folders (files matching `pattern`; default .txt, .jsonl(.gz/.zst), .parquet), globs,
        JSON Lines / Parquet files (their `text_field`), or folders written by `Dataset.save_to_disk`.
    tokenizer: `byte` (ids 0..255) or a local tokenizer.json (e.g. GPT-2's); train_tokenizer: instead,
        train a byte-level BPE of this vocabulary size on the corpus's training documents (at most
        `tokenizer_train_bytes` of them, in corpus order).
    separator: cut each file / row into documents on this string (None: one document per file / row).
    val_fraction / test_fraction / split_seed: the document-level split, as `DataConfig` names it; a
        study reading the file must state the same values.
    workers: tokenizing processes (None: every core this process may use for a BPE / tokenizer.json; one for
        `byte`, whose tokenizing is a copy that other processes would only add pickling to).
    """

    inputs: list[NonEmptyStr] = Field(min_length=1)
    output: NonEmptyStr = DEFAULT_OUTPUT
    tokenizer: str = "byte"
    train_tokenizer: Annotated[int, Strict(), Field(gt=BYTE_ALPHABET)] | None = None
    tokenizer_train_bytes: PositiveInt = 1 << 30
    eos_token: NonEmptyStr | None = None
    input_format: Literal["auto", "text", "jsonl", "parquet", "hf_disk"] = "auto"
    pattern: list[NonEmptyStr] | None = None
    text_field: NonEmptyStr = "text"
    hf_split: NonEmptyStr = "train"
    separator: NonEmptyStr | None = None
    val_fraction: OpenFraction = 0.1
    test_fraction: Fraction = 0.0
    split_seed: Seed = 0
    workers: PositiveInt | None = None
    batch_bytes: PositiveInt = 1 << 20
    max_piece_bytes: Annotated[int, Strict(), Field(ge=1024)] = 8 << 20

    @model_validator(mode="after")
    def _consistent(self) -> "PrepareConfig":
        if self.train_tokenizer is not None and self.tokenizer != "byte":
            raise ValueError("give either tokenizer (a tokenizer.json) or train_tokenizer (a vocabulary size to "
                             "train), not both")
        if self.tokenizer != "byte" and not self.tokenizer.endswith(".json"):
            raise ValueError(f"tokenizer must be 'byte' or the path of a tokenizer.json file (got {self.tokenizer!r})")
        if self.val_fraction + self.test_fraction >= 1:
            raise ValueError("val_fraction + test_fraction leaves nothing to train on; keep their sum below 1")
        if self.eos_token is not None and self.tokenizer == "byte" and self.train_tokenizer is None:
            raise ValueError("eos_token applies to a tokenizer.json; the byte tokenizer ends documents with byte 0")
        return self


def available_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _workers(cfg: PrepareConfig, spec: str) -> int:
    if cfg.workers is not None:
        return cfg.workers
    return 1 if spec == "byte" else available_cpus()


# Worker side: one tokenizer per process, loaded once --------------------------------------------------------

_WORKER: dict = {}


def _init_worker(spec: str, eos_token: str | None, dtype: str, child: bool) -> None:
    if child:  # one thread per process: the processes are the parallelism
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _WORKER.update(tokenizer=load_tokenizer(spec, eos_token), dtype=np.dtype(dtype))


def _encode(texts: list[bytes]) -> tuple[np.ndarray, np.ndarray, int]:
    """(all ids back to back, ids per text, largest id): one array crosses the process boundary, not many."""
    arrays = [_WORKER["tokenizer"].encode(text) for text in texts]
    lengths = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
    flat = np.concatenate(arrays).astype(_WORKER["dtype"], copy=False) if arrays else np.zeros(0, _WORKER["dtype"])
    return flat, lengths, int(flat.max()) if len(flat) else -1


# Driver side ----------------------------------------------------------------------------------------------

def _splitter(cfg: PrepareConfig) -> DocumentSplitter:
    return DocumentSplitter(cfg.split_seed, cfg.val_fraction, cfg.test_fraction)


def _pieces(cfg: PrepareConfig, sources: list[Source]):
    return read_pieces(sources, text_field=cfg.text_field, separator=cfg.separator, hf_split=cfg.hf_split,
                       max_piece_bytes=cfg.max_piece_bytes)


def _split_pieces(cfg: PrepareConfig, sources: list[Source], splitter: DocumentSplitter) -> Iterator[tuple]:
    """(piece, split) in corpus order. A document's split is known at its last piece (`splitter` compares
    whole contents), so the earlier pieces of a document cut into several carry None."""
    hasher, size = content_hasher(), 0
    for piece in _pieces(cfg, sources):
        hasher.update(piece.text)
        size += len(piece.text)
        if not piece.last:
            yield piece, None
            continue
        split = splitter.assign(piece.key, hasher.digest()[:16]) if size else splitter.by_key(piece.key)
        hasher, size = content_hasher(), 0
        yield piece, split


def _batches(cfg: PrepareConfig, sources: list[Source], splitter: DocumentSplitter) \
        -> Iterator[tuple[list, list[bytes]]]:
    """([(split, last, advance, bytes)], [text]) per about `batch_bytes` of text."""
    tags, texts, size = [], [], 0
    for piece, split in _split_pieces(cfg, sources, splitter):
        tags.append((split, piece.last, piece.advance, len(piece.text)))
        texts.append(piece.text)
        size += len(piece.text)
        if size >= cfg.batch_bytes:
            yield tags, texts
            tags, texts, size = [], [], 0
    if tags:
        yield tags, texts


def _training_texts(cfg: PrepareConfig, sources: list[Source], progress: Progress, used: dict) -> Iterator[str]:
    """Training-split text for the BPE trainer, up to `tokenizer_train_bytes`, in corpus order. A document's
    split is known at its last piece: its pieces wait until then (at most the bytes still wanted)."""
    waiting: list[bytes] = []
    for piece, split in _split_pieces(cfg, sources, _splitter(cfg)):
        progress.advance(piece.advance)
        if piece.text and used["bytes"] + sum(map(len, waiting)) < cfg.tokenizer_train_bytes:
            waiting.append(piece.text)
        if split is None:
            continue
        texts, waiting = waiting, []
        if split != TRAIN or not texts:
            continue
        used["documents"] += 1
        for text in texts:
            used["bytes"] += len(text)
            yield text.decode("utf-8", errors="replace")
        if used["bytes"] >= cfg.tokenizer_train_bytes:
            return


def _tokenizer(cfg: PrepareConfig, sources: list[Source], folder: Path, progress: Progress) -> tuple[str, dict]:
    """(what the workers load, its record): byte, a copy of the given file, or a BPE trained now."""
    if cfg.train_tokenizer is None and cfg.tokenizer == "byte":
        return "byte", {"kind": "byte", "file": None, "sha256": None}
    path = folder / TOKENIZER_FILE
    if cfg.train_tokenizer is not None:
        progress.stage(f"training a {cfg.train_tokenizer}-entry BPE", sum(s.disk_bytes for s in sources))
        used = {"bytes": 0, "documents": 0}
        train_bpe(_training_texts(cfg, sources, progress, used), cfg.train_tokenizer, path)
        record = {"kind": "trained_bpe", "trained_on_bytes": used["bytes"], "trained_on_documents": used["documents"]}
    else:
        given = Path(cfg.tokenizer).expanduser()
        if not given.is_file():
            raise FileNotFoundError(f"tokenizer: no tokenizer file at {given} (tokenizers are never downloaded)")
        shutil.copyfile(given, path)
        record = {"kind": "file", "source": str(given.resolve())}
    return str(path), {**record, "file": TOKENIZER_FILE, "sha256": full_sha256(path)}


def _tokenize(cfg: PrepareConfig, sources: list[Source], writer: SplitWriter, splitter: DocumentSplitter,
              spec: str, dtype: np.dtype, progress: Progress) -> int:
    """Stream every document through the workers into the writer; returns the bytes of text read."""
    workers = _workers(cfg, spec)
    progress.stage(f"tokenizing ({workers} process{'es' if workers > 1 else ''})",
                   sum(s.disk_bytes for s in sources))
    text_bytes = 0
    results = ordered_map(_encode, _batches(cfg, sources, splitter), workers, _init_worker,
                          (spec, cfg.eos_token, dtype.name, workers > 1))
    for tags, (flat, lengths, max_id) in results:
        ends = np.cumsum(lengths)
        for (split, last, advance, size), start, end in zip(tags, ends - lengths, ends):
            writer.write(split, flat[start:end], last, max_id)
            progress.advance(advance)
            text_bytes += size
    return text_bytes


def _check_splits(cfg: PrepareConfig, writer: SplitWriter) -> None:
    """Every split the study will read holds documents; otherwise say what to change, before publishing."""
    needed = [TRAIN, VALIDATION] + ([TEST] if cfg.test_fraction > 0 else [])
    empty = [split for split in needed if writer.documents[split] == 0]
    if empty:
        total = sum(writer.documents.values())
        raise ValueError(f"the {' and '.join(empty)} split got no document ({total} non-empty documents, "
                         f"val_fraction {cfg.val_fraction}, test_fraction {cfg.test_fraction}): add text, change "
                         "the fractions, or cut files into more documents with a separator")


def _metadata(cfg: PrepareConfig, sources: list[Source], tokenizer, record: dict, dtype, writer: SplitWriter,
              finished: dict, folder: Path, text_bytes: int, seconds: float, splitter: DocumentSplitter) -> dict:
    layout = finished["layout"]
    tokens = sum(entry["tokens"] for entry in layout.values())
    docs_file = folder / (Path(TOKEN_FILE).stem + DOCS_SUFFIX)
    eos_token = None if tokenizer.eos_id is None or tokenizer.name == "byte" else \
        tokenizer.tokenizer.id_to_token(tokenizer.eos_id)
    return {
        "format": FORMAT, "token_file": TOKEN_FILE, "dtype": np.dtype(dtype).name,
        "vocab_size": tokenizer.vocab_size, "max_token_id": writer.max_id,
        "eos_id": tokenizer.eos_id, "eos_token": eos_token,
        "tokenizer": {**record, "vocab_size": tokenizer.vocab_size},
        "tokens": tokens, "documents": sum(writer.documents.values()), "skipped_documents": writer.skipped,
        "text_bytes": text_bytes,
        "split": {"seed": cfg.split_seed, "val_fraction": cfg.val_fraction, "test_fraction": cfg.test_fraction,
                  **splitter.record(), **layout},
        "content": fingerprint(folder / TOKEN_FILE, finished["sha256"]),
        "documents_file": {"file": docs_file.name, **fingerprint(docs_file, full_sha256(docs_file))},
        "inputs": [str(Path(spec).expanduser().resolve()) for spec in cfg.inputs], "input_files": len(sources),
        "options": {"input_format": cfg.input_format, "separator": cfg.separator, "text_field": cfg.text_field,
                    "hf_split": cfg.hf_split},
        "prepared": {"at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "seconds": round(seconds, 3),
                     "workers": _workers(cfg, "byte" if record["file"] is None else record["file"])},
    }


def _publish(folder: Path, out: Path, has_tokenizer: bool) -> None:
    """Move the finished files into place, metadata last: until then a reader sees the previous output, whose
    old metadata is removed first so that it never describes a new token file."""
    token_path = out / TOKEN_FILE
    metadata_path(token_path).unlink(missing_ok=True)
    stem = Path(TOKEN_FILE).stem
    names = [stem + DOCS_SUFFIX] + ([TOKENIZER_FILE] if has_tokenizer else []) + [TOKEN_FILE, stem + META_SUFFIX]
    for name in names:
        os.replace(folder / name, out / name)


@contextmanager
def _exclusive(out: Path) -> Iterator[None]:
    with (out / LOCK).open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"another preparation is writing to {out}; wait for it or choose another output") \
                from None
        yield


def _prepare_into(cfg: PrepareConfig, sources: list[Source], folder: Path, out: Path, progress: Progress) -> dict:
    started = time.perf_counter()
    spec, record = _tokenizer(cfg, sources, folder, progress)
    tokenizer = load_tokenizer(spec, cfg.eos_token)
    dtype = np.dtype(np.uint16 if tokenizer.vocab_size <= UINT16_VOCABULARY else np.uint32)
    writer = SplitWriter(folder, dtype, tokenizer.eos_id)
    splitter = _splitter(cfg)
    try:
        text_bytes = _tokenize(cfg, sources, writer, splitter, spec, dtype, progress)
    finally:
        writer.close()
    _check_splits(cfg, writer)
    finished = writer.finish(folder / TOKEN_FILE, folder / (Path(TOKEN_FILE).stem + DOCS_SUFFIX))
    meta = _metadata(cfg, sources, tokenizer, record, dtype, writer, finished, folder, text_bytes,
                     time.perf_counter() - started, splitter)
    write_json_atomically(folder / (Path(TOKEN_FILE).stem + META_SUFFIX), meta)
    _publish(folder, out, record["file"] is not None)
    return meta


def prepare_corpus(cfg: PrepareConfig, progress: Progress | None = None) -> dict:
    """Tokenize, split and write `cfg.inputs` into `cfg.output`; returns the metadata written."""
    sources = expand_inputs(cfg.inputs, tuple(cfg.pattern) if cfg.pattern else None, cfg.input_format)
    out = Path(cfg.output).expanduser()
    out.mkdir(parents=True, exist_ok=True)
    with _exclusive(out):
        folder = out / PARTIAL
        shutil.rmtree(folder, ignore_errors=True)  # an interrupted run's leftovers: start over
        folder.mkdir()
        try:
            return _prepare_into(cfg, sources, folder, out, progress or NoProgress())
        finally:
            shutil.rmtree(folder, ignore_errors=True)

"""A tokenized, split corpus, checked before any training starts.

Everything lives in one 1-D token array (in memory for text, a memory map for token files):
- `documents[split]`: [start, end) ranges of whole documents (for a prepared token file: its held-out
  documents from the metadata's index; for a token file without metadata: runs of chunks); evaluation
  windows never cross one;
- `regions[split]`: ranges the training stream may draw windows from. Text documents of a split are laid
  out back to back, each followed by the document separator, so the train split is one region and windows
  run across document boundaries, as over a concatenated token stream (docs/method.md §5).
"""

from __future__ import annotations

import copy
import functools
import json
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from .config import DataConfig
from .prepared import check_prepared, prepared_spans
from .sources import documents_hash, open_token_file, read_documents, token_file_hash
from .splits import SPLITS, TEST, TRAIN, VALIDATION, DocumentSplitter, chunk_spans, chunk_splits, content_digest
from .token_meta import metadata_path, read_metadata
from .tokenization import ByteTokenizer, load_tokenizer

Span = tuple[int, int]
ID_SCAN_BLOCK = 1 << 24  # tokens checked per block when scanning a token file for out-of-vocabulary ids


@dataclass
class Corpus:
    tokens: np.ndarray
    documents: dict[str, list[Span]]
    regions: dict[str, list[Span]]
    content_hash: str
    vocab_size: int = 256
    record: dict = field(default_factory=dict)  # how it was built and split: logged with every trial
    ids_checked: bool = False  # True when every id is known to be in the vocabulary (a prepared file's metadata)

    def split(self, name: str) -> list[np.ndarray]:
        """Views (no copies) of the documents of one split."""
        return [self.tokens[start:end] for start, end in self.documents[name]]

    def stream_regions(self, name: str = TRAIN) -> list[np.ndarray]:
        return [self.tokens[start:end] for start, end in self.regions[name]]

    @property
    def train(self) -> list[np.ndarray]:
        return self.split(TRAIN)

    @property
    def validation(self) -> list[np.ndarray]:
        return self.split(VALIDATION)

    @property
    def test(self) -> list[np.ndarray]:
        return self.split(TEST)

    @property
    def train_tokens(self) -> int:
        return sum(end - start for start, end in self.documents[TRAIN])


def _document_corpus(cfg: DataConfig) -> Corpus:
    documents = read_documents(cfg)
    tokenizer = load_tokenizer(cfg.tokenizer, cfg.eos_token)
    hasher = documents_hash(documents)
    if tokenizer.fingerprint:
        hasher.update(b"tokenizer:" + tokenizer.fingerprint.encode())
    encoded = tokenizer.encode_documents([content for _, content in documents])
    by_split: dict[str, list[np.ndarray]] = {name: [] for name in SPLITS}
    splitter = DocumentSplitter(cfg.split_seed, cfg.val_fraction, cfg.test_fraction)
    for (key, content), ids in zip(documents, encoded):
        if len(ids):
            by_split[splitter.assign(key, content_digest(content))].append(ids)
    if splitter.moved:  # the key rule alone would have split this corpus otherwise: another data version
        hasher.update(b"splits:duplicates-follow-content")
    if not any(by_split.values()):
        raise ValueError(f"data source {cfg.source!r} ({cfg.path or 'stdlib'}): every document is empty")
    dtype = np.uint8 if isinstance(tokenizer, ByteTokenizer) else tokenizer.dtype
    separator = [] if tokenizer.eos_id is None else [tokenizer.eos_id]
    pieces: list[np.ndarray] = []
    docs: dict[str, list[tuple[int, int]]] = {}
    regions: dict[str, list[tuple[int, int]]] = {}
    offset = 0
    for name in SPLITS:
        docs[name], start = [], offset
        for ids in by_split[name]:
            docs[name].append((offset, offset + len(ids)))
            pieces.extend([ids, np.asarray(separator, dtype=dtype)])
            offset += len(ids) + len(separator)
        regions[name] = [(start, offset)] if offset > start else []
    tokens = np.concatenate(pieces).astype(dtype, copy=False)
    record = {"tokenizer": tokenizer.name, "documents": {name: len(docs[name]) for name in SPLITS},
              **splitter.record()}
    return Corpus(tokens=tokens, documents=docs, regions=regions, content_hash=hasher.hexdigest()[:16],
                  vocab_size=tokenizer.vocab_size, record=record)


def _token_file_corpus(cfg: DataConfig) -> Corpus:
    assert cfg.path is not None, "a tokens source has a path (DataConfig's validation)"
    path = Path(cfg.path).expanduser()
    meta = read_metadata(path) if path.is_file() else None
    if meta is not None:
        return _prepared_corpus(cfg, path, meta)
    warnings.warn(f"data.path {path} has no metadata ({metadata_path(path).name}): every trial scans the whole "
                  "file for out-of-vocabulary ids and splits it into chunks (minutes at 100 GB). "
                  "dape_core.data.prepare_corpus (orchestrator data prepare) writes a file that starts instantly",
                  stacklevel=4)  # the caller of load_corpus
    tokens = open_token_file(cfg)
    if cfg.tokenizer != "byte":
        tokenizer = load_tokenizer(cfg.tokenizer)
        vocab_size, name = tokenizer.vocab_size, tokenizer.name
    else:
        vocab_size, name = 256, "byte"
    if cfg.vocab_size is not None:
        vocab_size, name = cfg.vocab_size, f"data.vocab_size={cfg.vocab_size}"
    n_chunks = -(-len(tokens) // cfg.chunk_tokens)
    labels = chunk_splits(n_chunks, cfg.split_seed, cfg.val_fraction, cfg.test_fraction)
    spans = chunk_spans(labels, cfg.chunk_tokens, len(tokens))
    record = {"tokenizer": name, "metadata": None, "chunks": {split: labels.count(split) for split in SPLITS}}
    return Corpus(tokens=tokens, documents=spans, regions=spans, content_hash=token_file_hash(path)[:16],
                  vocab_size=vocab_size, record=record)


def _prepared_corpus(cfg: DataConfig, path: Path, meta: dict) -> Corpus:
    """A file written by `prepare_corpus`: checked against its metadata (no scan), split as recorded."""
    check_prepared(cfg, meta, path)
    documents, regions = prepared_spans(meta, path)
    record = {"tokenizer": cfg.tokenizer, "metadata": metadata_path(path).name,
              "documents": {split: meta["split"][split]["documents"] for split in SPLITS},
              "sha256": meta["content"]["sha256"]}
    for name in ("duplicates_folded", "duplicates_moved"):  # absent from files prepared before the rule
        if name in meta["split"]:
            record[name] = meta["split"][name]
    return Corpus(tokens=open_token_file(cfg), documents=documents, regions=regions,
                  content_hash=meta["content"]["sha256"][:16], vocab_size=meta["vocab_size"], record=record,
                  ids_checked=True)


def _blocks(tokens: np.ndarray):
    """(start, block) pairs over the ids. A memory map is read through a file handle instead of the map, so
    scanning a 100 GB file keeps one block in RAM rather than leaving every page resident."""
    if isinstance(tokens, np.memmap) and tokens.filename is not None:
        with open(tokens.filename, "rb") as handle:
            handle.seek(tokens.offset)
            for start in range(0, len(tokens), ID_SCAN_BLOCK):
                yield start, np.fromfile(handle, dtype=tokens.dtype, count=min(ID_SCAN_BLOCK, len(tokens) - start))
        return
    for start in range(0, len(tokens), ID_SCAN_BLOCK):
        yield start, tokens[start : start + ID_SCAN_BLOCK]


def check_token_ids(tokens: np.ndarray, vocab_size: int, where: str) -> None:
    """Every id in [0, vocab_size), checked block by block."""
    signed = np.issubdtype(tokens.dtype, np.signedinteger)
    for start, block in _blocks(tokens):
        if len(block) == 0 or (block.max() < vocab_size and not (signed and block.min() < 0)):
            continue  # max/min allocate nothing: the scan runs at memory speed
        bad = (block >= vocab_size) | (block < 0) if signed else block >= vocab_size
        if bad.any():
            index = int(np.argmax(bad))
            raise ValueError(f"{where}: token id {int(block[index])} at position {start + index} is outside the "
                             f"vocabulary [0, {vocab_size})")


def load_corpus(cfg: DataConfig) -> Corpus:
    if cfg.source == "stdlib" and cfg.tokenizer == "byte":  # once per process: a worker's trials read the same
        kept = _stdlib_corpus(json.dumps(asdict(cfg), sort_keys=True))
        return replace(kept, documents=dict(kept.documents), regions=dict(kept.regions),
                       record=copy.deepcopy(kept.record))
    return _loaded(cfg)


@functools.lru_cache(maxsize=2)
def _stdlib_corpus(config: str) -> Corpus:
    """The stdlib corpus of a `data:` config (as JSON), kept for the process: the embedded snapshot does not
    change (its SHA-256 is pinned, snapshot.py), and reading, hashing and encoding it take about a second
    per trial (issue 45). Its tokens are read-only; `load_corpus` hands out copies of the
    rest. Byte-level only: a tokenizer file could change between two trials."""
    corpus = _loaded(DataConfig(**json.loads(config)))
    corpus.tokens.flags.writeable = False
    return corpus


def _loaded(cfg: DataConfig) -> Corpus:
    corpus = _token_file_corpus(cfg) if cfg.source == "tokens" else _document_corpus(cfg)
    if not corpus.ids_checked:
        where = f"data.path {cfg.path} (vocabulary from {corpus.record['tokenizer']})" if cfg.path else "data"
        check_token_ids(corpus.tokens, corpus.vocab_size, where)
    counts = {name: sum(end - start for start, end in corpus.documents[name]) for name in SPLITS}
    corpus.record.update({"source": cfg.source, "path": cfg.path, "split_seed": cfg.split_seed,
                          "val_fraction": cfg.val_fraction, "test_fraction": cfg.test_fraction,
                          "tokens": counts, "vocab_size": corpus.vocab_size, "content_hash": corpus.content_hash})
    return corpus

"""Data: sources, tokenizers, deterministic splits and windows.

The default corpus (`source: stdlib`) is a fixed snapshot of CPython 3.11.7's standard library source shipped
with the package (snapshot.py: the same bytes on every machine, its archive's SHA-256 pinned), so nothing is
downloaded; its content hash is logged with every trial. Plain text
files, pre-tokenized token files (memory-mapped) and Hugging Face datasets saved to disk are the other
sources; see `DataConfig`. `prepare_corpus` tokenizes a corpus once into a token file with metadata, which
the `tokens` source then opens without scanning it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_attributes

_PUBLIC = {  # name -> the submodule it lives in
    "DataConfig": "config", "Corpus": "corpus", "check_token_ids": "corpus", "load_corpus": "corpus",
    "snapshot_documents": "snapshot", "SPLITS": "splits", "TEST": "splits", "TRAIN": "splits",
    "VALIDATION": "splits", "ByteTokenizer": "tokenization", "HFTokenizer": "tokenization",
    "load_tokenizer": "tokenization", "TokenBatch": "windows", "TrainStream": "windows",
    "evaluation_windows": "windows", "tail_windows": "windows", "PROTOCOL_VERSION": "windows",
    "anchored": "preflight", "data_problems": "preflight",
    "PrepareConfig": "prepare", "prepare_corpus": "prepare", "TokenFileChanged": "token_meta",
    "read_metadata": "token_meta", "verify_token_file": "token_meta",
}
__all__ = list(_PUBLIC) + ["DOC_SEPARATOR"]

DOC_SEPARATOR = 0  # byte 0 never occurs in source text: marks document boundaries in the byte-level stream

if TYPE_CHECKING:
    from .config import DataConfig
    from .corpus import Corpus, check_token_ids, load_corpus
    from .preflight import anchored, data_problems
    from .prepare import PrepareConfig, prepare_corpus
    from .snapshot import snapshot_documents
    from .splits import SPLITS, TEST, TRAIN, VALIDATION
    from .token_meta import TokenFileChanged, read_metadata, verify_token_file
    from .tokenization import ByteTokenizer, HFTokenizer, load_tokenizer
    from .windows import PROTOCOL_VERSION, TokenBatch, TrainStream, evaluation_windows, tail_windows

__getattr__, __dir__ = lazy_attributes(__name__, _PUBLIC)

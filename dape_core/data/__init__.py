"""Data: sources, tokenizers, deterministic splits and windows.

The default corpus is the Python standard library's own source (`*.py` under `sysconfig`'s stdlib path,
site-packages excluded), so nothing is downloaded; its content hash is logged with every trial. Plain text
files, pre-tokenized token files (memory-mapped) and Hugging Face datasets saved to disk are the other
sources; see `DataConfig`. `prepare_corpus` tokenizes a corpus once into a token file with metadata, which
the `tokens` source then opens without scanning it.
"""

from .config import DataConfig
from .corpus import Corpus, check_token_ids, load_corpus
from .preflight import anchored, data_problems
from .prepare import PrepareConfig, prepare_corpus
from .sources import stdlib_files
from .splits import SPLITS, TEST, TRAIN, VALIDATION
from .token_meta import TokenFileChanged, read_metadata, verify_token_file
from .tokenization import ByteTokenizer, HFTokenizer, load_tokenizer
from .windows import TokenBatch, TrainStream, evaluation_windows

DOC_SEPARATOR = 0  # byte 0 never occurs in source text: marks document boundaries in the byte-level stream

__all__ = [
    "DataConfig", "Corpus", "load_corpus", "check_token_ids", "stdlib_files", "SPLITS", "TRAIN",
    "VALIDATION", "TEST", "ByteTokenizer", "HFTokenizer", "load_tokenizer", "TokenBatch", "TrainStream",
    "evaluation_windows", "DOC_SEPARATOR", "PrepareConfig", "prepare_corpus", "TokenFileChanged", "read_metadata",
    "verify_token_file", "anchored", "data_problems",
]

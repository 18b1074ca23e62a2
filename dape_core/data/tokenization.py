"""Tokenizers: byte-level (the default) and a local Hugging Face `tokenizer.json` (e.g. GPT-2 BPE).

Nothing is fetched at run time: a tokenizer.json must be on disk, and a missing file or a missing
`tokenizers` package is a clear error naming what to do.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

# Tokens tried, in order, as the document separator of a tokenizer.json that has one.
EOS_CANDIDATES = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>")


class ByteTokenizer:
    """UTF-8 bytes as ids 0..255; byte 0 (absent from text) separates documents."""

    name = "byte"
    vocab_size = 256
    eos_id: int | None = 0
    fingerprint = ""  # the default: adds nothing to the data hash, so the stdlib hash stays comparable

    def encode_documents(self, documents: list[bytes]) -> list[np.ndarray]:
        return [self.encode(doc) for doc in documents]

    def encode(self, document: bytes) -> np.ndarray:
        return np.frombuffer(document.replace(b"\x00", b""), dtype=np.uint8)


class HFTokenizer:
    """A `tokenizers.Tokenizer` read from a local tokenizer.json, encoding without added special tokens."""

    def __init__(self, path: str, eos_token: str | None = None):
        file = Path(path).expanduser()
        if not file.is_file():
            raise FileNotFoundError(f"data.tokenizer: no tokenizer file at {file} (tokenizers are never downloaded; "
                                    "save the tokenizer.json there, e.g. GPT-2's from a machine with network access)")
        try:
            from tokenizers import Tokenizer
        except ImportError as error:  # pragma: no cover - the package is a dependency
            raise ImportError("data.tokenizer needs the 'tokenizers' package: pip install tokenizers") from error
        self.name = str(file)
        self.tokenizer = Tokenizer.from_file(str(file))
        self.vocab_size = self.tokenizer.get_vocab_size(with_added_tokens=True)
        self.fingerprint = hashlib.sha256(file.read_bytes()).hexdigest()[:16]
        self.eos_id = self._eos_id(eos_token)
        self.dtype = np.uint16 if self.vocab_size <= 1 << 16 else np.uint32

    def _eos_id(self, eos_token: str | None) -> int | None:
        if eos_token is not None:
            token_id = self.tokenizer.token_to_id(eos_token)
            if token_id is None:
                raise ValueError(f"data.eos_token {eos_token!r} is not in the tokenizer's vocabulary ({self.name})")
            return token_id
        for candidate in EOS_CANDIDATES:
            token_id = self.tokenizer.token_to_id(candidate)
            if token_id is not None:
                return token_id
        return None  # documents are concatenated without a separator

    def encode_documents(self, documents: list[bytes]) -> list[np.ndarray]:
        texts = [doc.decode("utf-8", errors="replace") for doc in documents]
        encodings = self.tokenizer.encode_batch(texts, add_special_tokens=False)
        return [np.asarray(encoding.ids, dtype=self.dtype) for encoding in encodings]

    def encode(self, document: bytes) -> np.ndarray:
        """One document on this thread only (encode_documents spreads a batch over every core)."""
        encoding = self.tokenizer.encode(document.decode("utf-8", errors="replace"), add_special_tokens=False)
        return np.asarray(encoding.ids, dtype=self.dtype)


def load_tokenizer(spec: str, eos_token: str | None = None) -> ByteTokenizer | HFTokenizer:
    if spec == "byte":
        if eos_token is not None:
            raise ValueError("data.eos_token applies to a tokenizer.json; the byte tokenizer separates documents "
                             "with byte 0")
        return ByteTokenizer()
    return HFTokenizer(spec, eos_token)

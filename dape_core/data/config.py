"""The `data:` section of an experiment: where the text comes from, how it is tokenized and split."""

from __future__ import annotations

from dataclasses import asdict

from pydantic import ConfigDict, field_validator, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from ..checks import one_of, positive_int_or_none

SOURCES = ("stdlib", "text", "tokens", "hf_disk")
TOKEN_DTYPES = ("uint16", "uint32", "int32", "int64")


@pydantic_dataclass(config=ConfigDict(extra="forbid"))
class DataConfig:
    """Where the tokens come from (`source`) and how they are split.

    source: `stdlib` (default: the Python standard library's own source, embedded, nothing downloaded),
        `text` (plain text files: a file, a folder searched with `pattern`, or a glob), `tokens` (a
        pre-tokenized `.bin` of `dtype` or a 1-D `.npy`, memory-mapped: nanoGPT / GPT-NeoX token files),
        `hf_disk` (a Hugging Face `datasets` dataset written with `save_to_disk`; needs `datasets`).
    path: the file, folder or glob for every source but `stdlib`.
    pattern: files taken from a `text` folder (recursive glob).
    separator: for `text` / `hf_disk`, split each file/row into documents on this string
        (None = one document per file/row).
    tokenizer: `byte` (ids 0..255) or the path of a local Hugging Face `tokenizer.json` (e.g. GPT-2 BPE);
        never fetched. For `tokens` it names the vocabulary the stored ids come from.
    vocab_size: vocabulary of a `tokens` file when no tokenizer.json describes it (ids must be below it).
    eos_token: the token put between documents (default: the tokenizer's `<|endoftext|>`, `</s>` or
        `<eos>` when it has one; byte 0 for `byte`).
    text_field / hf_split: the column and the split of a `hf_disk` dataset.
    val_fraction / test_fraction: share of documents (or of `chunk_tokens` chunks of a token file)
        held out; split_seed seeds that assignment. max_files: cap on files (rows for hf_disk), in order.
    """

    source: str = "stdlib"
    path: str | None = None
    pattern: str = "**/*.txt"
    separator: str | None = None
    tokenizer: str = "byte"
    vocab_size: int | None = None
    eos_token: str | None = None
    dtype: str = "uint16"
    text_field: str = "text"
    hf_split: str = "train"
    val_fraction: float = 0.1
    test_fraction: float = 0.0
    split_seed: int = 0
    chunk_tokens: int = 1 << 20
    max_files: int | None = None

    @field_validator("source")
    @classmethod
    def _known_source(cls, value: str) -> str:
        return one_of(value, SOURCES, "data source")

    @field_validator("dtype")
    @classmethod
    def _known_dtype(cls, value: str) -> str:
        return one_of(value, TOKEN_DTYPES, "token dtype")

    @field_validator("val_fraction")
    @classmethod
    def _fraction(cls, value: float) -> float:
        if not 0.0 < value < 1.0:
            raise ValueError(f"must be strictly between 0 and 1 (got {value})")
        return value

    @field_validator("test_fraction")
    @classmethod
    def _test_fraction(cls, value: float) -> float:
        if not 0.0 <= value < 1.0:
            raise ValueError(f"must be in [0, 1) (got {value})")
        return value

    @field_validator("separator", "eos_token")
    @classmethod
    def _not_empty(cls, value: str | None) -> str | None:
        if value == "":
            raise ValueError("must not be empty (leave it out instead)")
        return value

    @field_validator("chunk_tokens", "vocab_size", "max_files")
    @classmethod
    def _positive(cls, value: int | None) -> int | None:
        return positive_int_or_none(value)

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer(cls, value: str) -> str:
        if value != "byte" and not value.endswith(".json"):
            raise ValueError(f"tokenizer must be 'byte' or the path of a tokenizer.json file (got {value!r})")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> "DataConfig":
        if self.source == "stdlib" and self.path is not None:
            raise ValueError("data.path is not used by source 'stdlib' (the embedded corpus); remove it or pick "
                             "source 'text', 'tokens' or 'hf_disk'")
        if self.source != "stdlib" and not self.path:
            raise ValueError(f"data.path is required for source {self.source!r}")
        if self.val_fraction + self.test_fraction >= 1.0:
            raise ValueError(f"val_fraction + test_fraction = {self.val_fraction + self.test_fraction} leaves "
                             "nothing to train on; keep their sum below 1")
        if self.source == "tokens" and self.separator is not None:
            raise ValueError("data.separator splits text; a 'tokens' file is already one token stream")
        return self

    def to_dict(self) -> dict:
        return asdict(self)

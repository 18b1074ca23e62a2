"""The `data:` section of an experiment: where the text comes from, how it is tokenized and split."""

from __future__ import annotations

from dataclasses import asdict
from typing import Literal

from pydantic import ConfigDict, field_validator, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from ..types import Fraction, NonEmptyStr, OpenFraction, PositiveInt, Seed

Source = Literal["stdlib", "text", "tokens", "hf_disk"]
TokenDtype = Literal["uint16", "uint32", "int32", "int64"]
BYTE_VOCABULARY = 256  # the `byte` tokenizer's ids 0..255


@pydantic_dataclass(config=ConfigDict(extra="forbid"))
class DataConfig:
    """Where the tokens come from (`source`) and how they are split.

    source: `stdlib` (default: a fixed snapshot of CPython 3.11.7's standard library source shipped with the
        package, the same bytes on every machine, nothing downloaded: snapshot.py),
        `text` (plain text files: a file, a folder searched with `pattern`, or a glob), `tokens` (a
        pre-tokenized `.bin` of `dtype` or a 1-D `.npy`, memory-mapped: a corpus prepared by
        `prepare_corpus`, whose metadata then replaces the scan and gives the split, or nanoGPT / GPT-NeoX
        token files),
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
    val_fraction / test_fraction: share of documents (or of `chunk_tokens` chunks of a token file without
        metadata) held out; split_seed seeds that assignment. A prepared file was split when it was
        prepared: these must then equal its metadata's. max_files: cap on files (rows for hf_disk), in order.
    """

    source: Source = "stdlib"
    path: NonEmptyStr | None = None
    pattern: NonEmptyStr = "**/*.txt"
    separator: NonEmptyStr | None = None
    tokenizer: str = "byte"
    vocab_size: PositiveInt | None = None
    eos_token: NonEmptyStr | None = None
    dtype: TokenDtype = "uint16"
    text_field: NonEmptyStr = "text"
    hf_split: NonEmptyStr = "train"
    val_fraction: OpenFraction = 0.1
    test_fraction: Fraction = 0.0
    split_seed: Seed = 0
    chunk_tokens: PositiveInt = 1 << 20
    max_files: PositiveInt | None = None

    @field_validator("tokenizer")
    @classmethod
    def _tokenizer(cls, value: str) -> str:
        """A name or a path: a pattern's message would show a regular expression instead of these words."""
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

    @property
    def known_vocabulary(self) -> int | None:
        """The data's vocabulary when it is known without reading any file (the `byte` tokenizer, or a token
        file's `vocab_size`), else None: a tokenizer.json is read at data time."""
        if self.source == "tokens" and self.vocab_size is not None:
            return self.vocab_size
        return BYTE_VOCABULARY if self.tokenizer == "byte" else None

    def to_dict(self) -> dict:
        return asdict(self)

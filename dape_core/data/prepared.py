"""Read a token file prepared by `prepare_corpus` through its metadata: a lookup, not a scan, at trial start.

What a trial used to compute from the whole file (the largest id, a chunk split) is read from
`tokens.meta.json`; the file is checked against the metadata's size and sampled hash (see `token_meta` for
why not a full hash). The study's `data:` section must agree with what the file is: the same dtype, the
same tokenizer (by sha256), the same split. A disagreement is an error naming the value to set, because a
silently different value would be logged as a param the trial did not use.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from .config import DataConfig
from .splits import TEST, TRAIN, VALIDATION
from .token_meta import documents_path, held_out_documents, metadata_path, verify_file

Span = tuple[int, int]


def _tokenizer_problems(cfg: DataConfig, meta: dict, folder: Path) -> list[str]:
    recorded = meta["tokenizer"]
    if recorded["kind"] == "byte":
        if cfg.tokenizer != "byte":
            return [f"data.tokenizer is {cfg.tokenizer!r} but the file holds byte-level ids: set data.tokenizer: byte"]
        return []
    beside = folder / recorded["file"]
    if cfg.tokenizer == "byte":
        return [f"data.tokenizer is 'byte' but the file was tokenized with a {meta['vocab_size']}-entry tokenizer "
                f"({recorded['kind']}): set data.tokenizer: {beside}"]
    given = Path(cfg.tokenizer).expanduser()
    if not given.is_file():
        return [f"data.tokenizer: no tokenizer file at {given} (the file's own tokenizer is {beside})"]
    if hashlib.sha256(given.read_bytes()).hexdigest() != recorded["sha256"]:
        return [f"data.tokenizer {given} is not the tokenizer the file was made with (its sha256 differs from the "
                f"metadata's): set data.tokenizer: {beside}"]
    return []


def config_problems(cfg: DataConfig, meta: dict, token_path: Path) -> list[str]:
    """Every way the `data:` section disagrees with the prepared file, each with the value to set."""
    problems = []
    if cfg.dtype != meta["dtype"]:
        problems.append(f"data.dtype is {cfg.dtype!r} but the file holds {meta['dtype']} ids: set data.dtype: "
                        f"{meta['dtype']}")
    split = meta["split"]
    for field, recorded in (("val_fraction", split["val_fraction"]), ("test_fraction", split["test_fraction"]),
                            ("split_seed", split["seed"])):
        if getattr(cfg, field) != recorded:
            problems.append(f"data.{field} is {getattr(cfg, field)} but the file was split with {recorded} when it "
                            f"was prepared: set data.{field}: {recorded}")
    if cfg.vocab_size is not None and cfg.vocab_size != meta["vocab_size"]:
        problems.append(f"data.vocab_size is {cfg.vocab_size} but the file's vocabulary has {meta['vocab_size']} "
                        "entries: leave data.vocab_size out (the metadata gives it)")
    if cfg.eos_token is not None and cfg.eos_token != meta["eos_token"]:
        problems.append(f"data.eos_token is {cfg.eos_token!r} but the file separates documents with "
                        f"{meta['eos_token']!r}: leave data.eos_token out")
    return problems + _tokenizer_problems(cfg, meta, token_path.parent)


def check_prepared(cfg: DataConfig, meta: dict, token_path: Path) -> None:
    """Config agreement, then the file and its documents index against their recorded fingerprints."""
    problems = config_problems(cfg, meta, token_path)
    if problems:
        listed = "\n".join(f"  - {problem}" for problem in problems)
        raise ValueError(f"data.path {token_path} was prepared differently from what the data section says "
                         f"({metadata_path(token_path).name}):\n{listed}")
    verify_file(token_path, meta["content"])
    verify_file(documents_path(token_path), meta["documents_file"], full=True)
    if meta["max_token_id"] >= meta["vocab_size"]:  # the out-of-vocabulary check, as a lookup
        raise ValueError(f"data.path {token_path}: its largest token id {meta['max_token_id']} is outside the "
                         f"vocabulary [0, {meta['vocab_size']})")


def prepared_spans(meta: dict, token_path: Path) -> tuple[dict[str, list[Span]], dict[str, list[Span]]]:
    """(documents, regions) per split: the training split is one region (windows run across documents, as
    over a concatenated stream); held-out documents come from the index, for windows inside one document."""
    layout = meta["split"]
    regions = {split: [(layout[split]["start"], layout[split]["end"])] if layout[split]["tokens"] else []
               for split in (TRAIN, VALIDATION, TEST)}
    documents = {TRAIN: regions[TRAIN],
                 VALIDATION: held_out_documents(token_path, meta, VALIDATION),
                 TEST: held_out_documents(token_path, meta, TEST)}
    return documents, regions

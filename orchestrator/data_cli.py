"""`orchestrator data`: prepare a corpus into the token file the studies' `paper` profiles read, and verify one.

A thin command line over `dape_core.data.prepare_corpus` (which a researcher can also call from Python);
every option maps to a `PrepareConfig` field. Exit codes: 0 done; 1 a token file failed verification;
2 invalid option or input (nothing written); 130 interrupted (nothing written, the previous output intact).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape

data_app = typer.Typer(no_args_is_help=True, help="Prepare a corpus once into a token file with metadata; verify one.")
_WIDTH = None if sys.stdout.isatty() else 160
console = Console(highlight=False, soft_wrap=True, width=_WIDTH)
err = Console(stderr=True, highlight=False, soft_wrap=True, width=_WIDTH)
EXIT_CHANGED, EXIT_INVALID, EXIT_CTRL_C = 1, 2, 130

# PrepareConfig field -> the option that sets it, so that validation errors name what the user typed.
OPTIONS = {"inputs": "INPUTS", "output": "--output", "tokenizer": "--tokenizer", "train_tokenizer": "--train-tokenizer",
           "tokenizer_train_bytes": "--tokenizer-train-bytes", "eos_token": "--eos-token", "input_format": "--format",
           "pattern": "--pattern", "text_field": "--text-field", "hf_split": "--hf-split", "separator": "--separator",
           "val_fraction": "--val-fraction", "test_fraction": "--test-fraction", "split_seed": "--split-seed",
           "workers": "--workers"}


def _config_or_exit(fields: dict):
    from pydantic import ValidationError

    from dape_core.data import PrepareConfig

    try:
        return PrepareConfig(**{key: value for key, value in fields.items() if value is not None})
    except ValidationError as error:
        for problem in error.errors():
            where = OPTIONS.get(str(problem["loc"][0]), "options") if problem["loc"] else "options"
            err.print(f"[red]Invalid option[/red] {where}: {escape(problem['msg'])}")
        raise typer.Exit(EXIT_INVALID)


def _summary(meta: dict, output: Path, seconds: float) -> None:
    split = meta["split"]
    counts = ", ".join(f"{name} {split[name]['documents']} documents / {split[name]['tokens']:,} tokens"
                       for name in ("train", "validation", "test") if split[name]["documents"])
    console.print(f"Prepared {meta['text_bytes'] / 1e6:,.1f} MB of text in {seconds:.1f}s "
                  f"({meta['text_bytes'] / 1e6 / max(seconds, 1e-9):.2f} MB/s, "
                  f"{meta['prepared']['workers']} process(es)): "
                  f"{meta['tokens']:,} {meta['dtype']} tokens, vocabulary {meta['vocab_size']}; {counts}")
    if meta["skipped_documents"]:
        console.print(f"{meta['skipped_documents']} empty document(s) skipped")
    if split.get("duplicates_folded"):
        console.print(f"{split['duplicates_folded']} document(s) repeat an earlier one's content and went to its "
                      f"split ({split['duplicates_moved']} of them would have crossed splits by their name)")
    token_file = output / meta["token_file"]
    console.print(f"Wrote {token_file} ({meta['content']['bytes'] / 1e6:,.1f} MB), {token_file.stem}.meta.json, "
                  f"{token_file.stem}.docs.npy"
                  + (f", {meta['tokenizer']['file']}" if meta["tokenizer"]["file"] else ""))
    tokenizer = f", tokenizer: {output / meta['tokenizer']['file']}" if meta["tokenizer"]["file"] else ""
    split_fields = "".join(f", {key}: {value}" for key, value, default in
                           (("val_fraction", split["val_fraction"], 0.1),
                            ("test_fraction", split["test_fraction"], 0.0),
                            ("split_seed", split["seed"], 0)) if value != default)
    console.print(f"A study reads it with:\n  data: {{source: tokens, path: {token_file}, dtype: {meta['dtype']}"
                  f"{tokenizer}{split_fields}}}\n  model.vocab_size: at least {meta['vocab_size']}")


@data_app.command()
def prepare(
    inputs: Annotated[list[str], typer.Argument(
        metavar="INPUTS...",
        help="Text files, folders, globs, .jsonl(.gz/.zst), .parquet, or folders saved by datasets.")],
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="Output folder: tokens.bin, tokens.meta.json, tokens.docs.npy, tokenizer.json.")
    ] = Path("data/paper"),
    tokenizer: Annotated[Optional[str], typer.Option(help="A local tokenizer.json (e.g. GPT-2's); default: "
                                                          "byte-level.")] = None,
    train_tokenizer: Annotated[Optional[int], typer.Option(
        metavar="VOCAB", help="Train a byte-level BPE of this vocabulary on the training documents.")] = None,
    tokenizer_train_bytes: Annotated[Optional[int], typer.Option(help="At most this much text trains the BPE (default "
                                                                      "1 GiB).")] = None,
    eos_token: Annotated[Optional[str], typer.Option(help="End-of-text token of a tokenizer.json (default: its "
                                                          "<|endoftext|>, </s> or <eos>).")] = None,
    input_format: Annotated[str, typer.Option("--format", help="auto (by file suffix), text, jsonl, parquet or "
                                                               "hf_disk.")] = "auto",
    pattern: Annotated[Optional[list[str]], typer.Option(help="Files taken from a folder (repeatable; default: *.txt, "
                                                              "*.jsonl(.gz/.zst), *.parquet, recursively).")] = None,
    text_field: Annotated[Optional[str], typer.Option(help="The text column of JSON Lines / Parquet / saved datasets "
                                                           "(default: text).")] = None,
    hf_split: Annotated[Optional[str], typer.Option(help="The split of a saved DatasetDict (default: train).")] = None,
    separator: Annotated[Optional[str], typer.Option(help="Cut files / rows into documents on this string.")] = None,
    val_fraction: Annotated[Optional[float], typer.Option(help="Share of documents held out for validation (default "
                                                               "0.1).")] = None,
    test_fraction: Annotated[Optional[float], typer.Option(help="Share of documents held out for test (default "
                                                                "0).")] = None,
    split_seed: Annotated[Optional[int], typer.Option(help="Seed of the document split (default 0).")] = None,
    workers: Annotated[Optional[int], typer.Option(help="Tokenizing processes (default: every core; one for "
                                                        "byte-level).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Tokenize and split a corpus into OUTPUT/tokens.bin with its metadata (default OUTPUT: data/paper, what
    the studies' paper profiles read)."""
    cfg = _config_or_exit({"inputs": inputs, "output": str(output), "tokenizer": tokenizer,
                           "train_tokenizer": train_tokenizer, "tokenizer_train_bytes": tokenizer_train_bytes,
                           "eos_token": eos_token, "input_format": input_format, "pattern": pattern,
                           "text_field": text_field, "hf_split": hf_split, "separator": separator,
                           "val_fraction": val_fraction, "test_fraction": test_fraction, "split_seed": split_seed,
                           "workers": workers})
    from contextlib import nullcontext

    from dape_core.data import prepare_corpus
    from dape_core.data.progress import rich_progress

    started = time.perf_counter()
    try:
        with (nullcontext(None) if quiet else rich_progress()) as progress:
            meta = prepare_corpus(cfg, progress)
    except KeyboardInterrupt:
        err.print(f"Interrupted: nothing was written; {output} holds what it held before, if anything. Run the "
                  "same command to start over.")
        raise typer.Exit(EXIT_CTRL_C)
    except (OSError, ValueError, ImportError, RuntimeError) as error:
        err.print(f"[red]Cannot prepare[/red] {escape(str(error))}\nNothing was written: {output} holds what it "
                  "held before, if anything.")
        raise typer.Exit(EXIT_INVALID)
    _summary(meta, output, time.perf_counter() - started)


@data_app.command()
def verify(
    token_file: Annotated[Path, typer.Argument(metavar="TOKEN_FILE", help="A prepared tokens.bin.")],
    quick: Annotated[bool, typer.Option("--quick", help="Size and sampled blocks only (what every trial checks), not "
                                                        "the full sha256.")] = False,
) -> None:
    """Check a prepared token file against its metadata: by default its full sha256."""
    from dape_core.data import TokenFileChanged, verify_token_file

    started = time.perf_counter()
    try:
        meta = verify_token_file(token_file, full=not quick)
    except TokenFileChanged as error:
        err.print(f"[red]Changed[/red] {escape(str(error))}")
        raise typer.Exit(EXIT_CHANGED)
    except (OSError, ValueError) as error:
        err.print(f"[red]Cannot verify[/red] {escape(str(error))}")
        raise typer.Exit(EXIT_INVALID)
    what = "size and sampled blocks" if quick else f"sha256 {meta['content']['sha256'][:16]}…"
    console.print(f"{token_file}: matches its metadata ({what}; {meta['tokens']:,} tokens, "
                  f"{meta['documents']:,} documents) in {time.perf_counter() - started:.1f}s")

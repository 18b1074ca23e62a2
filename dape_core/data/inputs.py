"""Streaming readers of a raw corpus for `prepare_corpus`: text files, JSON Lines, Parquet, saved HF datasets.

A corpus larger than memory must never be read whole, so every reader yields `Piece`s: a piece is at most
about `max_piece_bytes` of one document's UTF-8 text. Most documents are one piece; a huge text file with no
separator is cut at line ends into several pieces of the same document (they are tokenized separately and
written back to back, so the document stays one run of tokens). A piece's `key` names its document: the
document's split is decided by a seeded hash of the key, as the in-memory `text` source does (relative
path, `path#i` for the i-th part of a file cut on a separator, `path:line` for JSON Lines, `path:row` for
Parquet, the row index for a saved dataset).

`.gz` files are read through gzip and `.zst` files through the `zstandard` package when it is installed
(The Pile ships as `.jsonl.zst`).
"""

from __future__ import annotations

import gzip
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, cast

from .raw_inputs import expand_path, load_saved_dataset

FORMATS = ("auto", "text", "jsonl", "parquet", "hf_disk")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
DEFAULT_PATTERNS = ("**/*.txt", "**/*.jsonl", "**/*.jsonl.gz", "**/*.jsonl.zst", "**/*.parquet")
HF_DISK_MARKERS = ("dataset_info.json", "state.json", "dataset_dict.json")
READ_BLOCK = 1 << 20


@dataclass(frozen=True)
class Piece:
    key: str  # the document this text belongs to
    text: bytes  # UTF-8
    last: bool  # the document's last piece: the end-of-text token follows it
    advance: int = 0  # bytes of input (on disk) consumed with this piece: drives the progress bar


@dataclass(frozen=True)
class Source:
    """One input file (or saved dataset folder), its format, and the key prefix of its documents."""

    path: Path
    format: str
    key: str

    @property
    def disk_bytes(self) -> int:
        if self.path.is_dir():
            return sum(p.stat().st_size for p in self.path.rglob("*.arrow"))
        return self.path.stat().st_size


def _stem_suffix(path: Path) -> str:
    """The suffix that names the format, under a compression suffix: a.jsonl.gz -> .jsonl."""
    suffixes = path.suffixes
    if suffixes and suffixes[-1] in (".gz", ".zst") and len(suffixes) > 1:
        return suffixes[-2]
    return path.suffix


def detect_format(path: Path) -> str:
    if path.is_dir():
        return "hf_disk"
    suffix = _stem_suffix(path)
    if suffix in JSONL_SUFFIXES:
        return "jsonl"
    if suffix == ".parquet":
        return "parquet"
    return "text"


def _is_saved_dataset(path: Path) -> bool:
    return path.is_dir() and any((path / marker).is_file() for marker in HF_DISK_MARKERS)


def _no_file_in(folder: Path, patterns: tuple[str, ...]) -> FileNotFoundError:
    suffixes = sorted({p.suffix or p.name for p in folder.rglob("*") if p.is_file()})[:12]
    return FileNotFoundError(f"input {folder}: no file matches {', '.join(patterns)} (the folder holds "
                             f"{', '.join(suffixes) or 'no files'}); name the files with a pattern, e.g. '**/*.md'")


def expand_inputs(inputs: list[str], patterns: tuple[str, ...] | None = None,
                  input_format: str = "auto") -> list[Source]:
    """Files (sorted within each input) for files, folders and globs; a saved HF dataset stays one source.

    Keys are relative to the input they came from, so a document keeps its split when files are added.
    """
    if input_format not in FORMATS:
        raise ValueError(f"unknown input format {input_format!r}; valid: {', '.join(FORMATS)}")
    sources: list[Source] = []
    for spec in inputs:
        path = Path(spec).expanduser()
        if _is_saved_dataset(path) or (input_format == "hf_disk" and path.is_dir()):
            sources.append(Source(path, "hf_disk", ""))
            continue
        found = expand_path(spec, patterns or DEFAULT_PATTERNS)
        if found.kind == "missing":
            raise FileNotFoundError(f"input {path} does not exist")
        if not found.files:
            if found.kind == "folder":
                raise _no_file_in(path, patterns or DEFAULT_PATTERNS)
            raise FileNotFoundError(f"input glob {spec!r} matches no file")
        for file in found.files:
            kind = detect_format(file) if input_format == "auto" else input_format
            sources.append(Source(file, kind, file.relative_to(found.root).as_posix()))
    return sources


def _open_binary(path: Path) -> tuple[BinaryIO, BinaryIO]:
    """(decompressed stream, raw file): the raw file's position measures progress."""
    raw = path.open("rb")
    if path.suffix == ".gz":
        return cast(BinaryIO, gzip.GzipFile(fileobj=raw)), raw
    if path.suffix == ".zst":
        try:
            import zstandard
        except ImportError as error:
            raw.close()
            raise ImportError(f"input {path} is zstandard-compressed: pip install zstandard") from error
        return zstandard.ZstdDecompressor().stream_reader(raw), raw
    return raw, raw


def _cut(buffer: bytes, limit: int) -> int:
    """Where to cut a too-long document: after the last newline before `limit`, else at a UTF-8 boundary."""
    newline = buffer.rfind(b"\n", 0, limit)
    if newline > 0:
        return newline + 1
    cut = limit
    while cut > 0 and (buffer[cut] & 0xC0) == 0x80:  # never inside a multi-byte character
        cut -= 1
    return cut or limit


def _split_documents(stream: BinaryIO, raw: BinaryIO, key: str, separator: bytes | None,
                     max_piece_bytes: int) -> Iterator[Piece]:
    """Documents of one text stream (the whole stream, or its parts between separators), in pieces."""
    buffer, index, reported = b"", 0, 0

    def progress() -> int:
        nonlocal reported
        position = raw.tell()
        advance, reported = position - reported, position
        return advance

    def doc_key() -> str:
        return key if separator is None else f"{key}#{index}"

    for block in iter(lambda: stream.read(READ_BLOCK), b""):
        buffer += block
        while separator is not None and (at := buffer.find(separator)) >= 0:
            document, buffer = buffer[:at], buffer[at + len(separator):]
            # Always close the document (pieces of it may be out already); a blank one is skipped when written.
            yield Piece(doc_key(), document if document.strip() else b"", True, progress())
            index += 1
        while len(buffer) > max_piece_bytes:
            cut = _cut(buffer, max_piece_bytes)
            yield Piece(doc_key(), buffer[:cut], False, progress())
            buffer = buffer[cut:]
    yield Piece(doc_key(), buffer if buffer.strip() or separator is None else b"", True, progress())


def read_text(source: Source, separator: str | None, max_piece_bytes: int) -> Iterator[Piece]:
    stream, raw = _open_binary(source.path)
    with raw, stream:
        yield from _split_documents(stream, raw, source.key, separator.encode() if separator else None,
                                    max_piece_bytes)


def _documents_of(key: str, text: str, separator: str | None, advance: int) -> Iterator[Piece]:
    """One row's documents (split on `separator` when given); the row's progress rides on its first piece."""
    if separator is None:
        yield Piece(key, text.encode("utf-8"), True, advance)
        return
    for index, part in enumerate(text.split(separator)):
        if part.strip():
            yield Piece(f"{key}#{index}", part.encode("utf-8"), True, advance)
            advance = 0
    if advance:
        yield Piece(key, b"", True, advance)


def _row_text(value, field: str, where: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{where}: text field {field!r} holds {type(value).__name__}, not text")
    return value


def read_jsonl(source: Source, field: str, separator: str | None) -> Iterator[Piece]:
    stream, raw = _open_binary(source.path)
    reported = 0
    with raw, stream:
        for number, line in enumerate(io.TextIOWrapper(stream, encoding="utf-8", errors="replace"), start=1):
            if not line.strip():
                continue
            where = f"{source.path}:{number}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{where}: not a JSON object ({error.msg})") from None
            if not isinstance(row, dict) or field not in row:
                keys = ", ".join(row) if isinstance(row, dict) else type(row).__name__
                raise ValueError(f"{where}: no text field {field!r} (the row has: {keys}); name it with text_field")
            position = raw.tell()
            yield from _documents_of(f"{source.key}:{number}", _row_text(row[field], field, where), separator,
                                     position - reported)
            reported = position


def read_parquet(source: Source, field: str, separator: str | None) -> Iterator[Piece]:
    import pyarrow.parquet as pq

    table = pq.ParquetFile(source.path)
    columns = table.schema_arrow.names
    if field not in columns:
        raise ValueError(f"{source.path}: no column {field!r} (columns: {', '.join(columns)}); name it with "
                         "text_field")
    total_rows, size, row = max(1, table.metadata.num_rows), source.disk_bytes, 0
    for batch in table.iter_batches(columns=[field], batch_size=1024):
        for value in batch.column(0).to_pylist():
            text = _row_text(value, field, f"{source.path} row {row}")
            advance = (row + 1) * size // total_rows - row * size // total_rows
            yield from _documents_of(f"{source.key}:{row}", text, separator, advance)
            row += 1


def read_hf_disk(source: Source, field: str, separator: str | None, split: str) -> Iterator[Piece]:
    dataset = load_saved_dataset(source.path, split, field)
    total_rows, size, row = max(1, len(dataset)), source.disk_bytes, 0
    for batch in dataset.select_columns([field]).iter(batch_size=1024):
        for value in batch[field]:
            text = _row_text(value, field, f"{source.path} row {row}")
            advance = (row + 1) * size // total_rows - row * size // total_rows
            yield from _documents_of(str(row) if not source.key else f"{source.key}:{row}", text, separator,
                                     advance)
            row += 1


def read_pieces(sources: list[Source], *, text_field: str = "text", separator: str | None = None,
                hf_split: str = "train", max_piece_bytes: int = 8 << 20) -> Iterator[Piece]:
    """Every document of every source, in order, as pieces of at most about `max_piece_bytes`."""
    for source in sources:
        if source.format == "text":
            yield from read_text(source, separator, max_piece_bytes)
        elif source.format == "jsonl":
            yield from read_jsonl(source, text_field, separator)
        elif source.format == "parquet":
            yield from read_parquet(source, text_field, separator)
        else:
            yield from read_hf_disk(source, text_field, separator, hf_split)

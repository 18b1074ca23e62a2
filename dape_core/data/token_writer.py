"""Writes tokenized documents into one token file, grouped by split, with bounded memory.

Documents arrive in corpus order with their split decided (a document cut into pieces learns it at its
last piece, decided by its whole content: the pieces before wait in a spill file, on disk). Training
documents go straight into what becomes the token file, held-out ones into side files (a few percent of the
corpus); `finish` appends validation then test, so each split is one contiguous run of the file and the
split is three spans. Each
document is followed by the end-of-text token (when the tokenizer has one). The spans of held-out documents
(evaluation windows never cross a document) go to a small index; the file's sha256 is computed while it is
written, so the full hash costs no second pass.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import numpy as np

from .splits import SPLITS, TEST, TRAIN, VALIDATION

COPY_BLOCK = 16 << 20
HELD_OUT = (VALIDATION, TEST)


class SplitWriter:
    def __init__(self, folder: Path, dtype: np.dtype, eos_id: int | None):
        self.folder, self.dtype = folder, np.dtype(dtype)
        self.separator = b"" if eos_id is None else np.asarray([eos_id], dtype=self.dtype).tobytes()
        self.files = {split: (folder / f"{split}.part").open("wb") for split in SPLITS}
        self.spans = {split: (folder / f"{split}.spans").open("wb") for split in HELD_OUT}
        self.length = dict.fromkeys(SPLITS, 0)  # tokens written per split
        self.documents = dict.fromkeys(SPLITS, 0)
        self.skipped = 0  # documents with no token (empty files, blank rows)
        self.max_id = -1
        self._hash = hashlib.sha256()  # of the train part: the head of the final file
        self._open: tuple[str, int] | None = None  # (split, start) of the document being written
        self._spill: Any = None  # pieces of a document whose split is not known yet

    def write(self, split: str | None, tokens: np.ndarray, last: bool, max_id: int = -1) -> None:
        """One piece of a document; `last` closes the document. A document's split may be known only at its
        last piece (it is decided by the whole content): earlier pieces with split None wait in a spill file
        and follow the last one into its split."""
        data = tokens.astype(self.dtype, copy=False).tobytes() if len(tokens) else b""
        if len(tokens):
            self.max_id = max(self.max_id, max_id)
        if split is None:
            assert not last and self._open is None, "a document's split is named by its last piece at the latest"
            self._waiting().write(data)
            return
        if self._open is None:
            self._open = (split, self.length[split])
            self._release_waiting(split)
        if data:
            self._append(split, data)
        if last:
            self._close_document()

    def _waiting(self):
        if self._spill is None:
            self._spill = (self.folder / "waiting.part").open("w+b")
        return self._spill

    def _release_waiting(self, split: str) -> None:
        """The pieces held back for the document now known to belong to `split`, appended to it."""
        if self._spill is None or not self._spill.tell():
            return
        self._spill.seek(0)
        for block in iter(lambda: self._spill.read(COPY_BLOCK), b""):
            self._append(split, block)
        self._spill.seek(0)
        self._spill.truncate()

    def _append(self, split: str, data: bytes) -> None:
        self.files[split].write(data)
        if split == TRAIN:
            self._hash.update(data)
        self.length[split] += len(data) // self.dtype.itemsize

    def _close_document(self) -> None:
        assert self._open is not None, "a document is open (write() opens it before closing it)"
        split, start = self._open
        self._open = None
        end = self.length[split]
        if end == start:
            self.skipped += 1
            return
        self.documents[split] += 1
        if split in self.spans:
            self.spans[split].write(np.asarray([start, end], dtype=np.int64).tobytes())
        if self.separator:
            self._append(split, self.separator)
            self.max_id = max(self.max_id, int(np.frombuffer(self.separator, dtype=self.dtype)[0]))

    def finish(self, token_path: Path, spans_path: Path) -> dict:
        """Append the held-out parts to the train part, write the held-out spans (offsets into the final
        file), and return the split layout and the file's sha256."""
        self.close()
        head = self.folder / f"{TRAIN}.part"
        layout, offset, rows, row = {}, 0, [], 0
        with head.open("ab") as out:
            for split in SPLITS:
                if split != TRAIN:
                    self._copy_into(out, self.folder / f"{split}.part")
                entry: dict[str, Any] = {"start": offset, "end": offset + self.length[split],
                                         "tokens": self.length[split], "documents": self.documents[split]}
                if split in HELD_OUT:
                    spans = np.fromfile(self.folder / f"{split}.spans", dtype=np.int64).reshape(-1, 2) + offset
                    entry["document_rows"] = [row, row + len(spans)]  # rows of the index holding this split
                    rows.append(spans)
                    row += len(spans)
                layout[split] = entry
                offset += self.length[split]
            out.flush()
            os.fsync(out.fileno())
        head.replace(token_path)
        index = np.concatenate(rows) if rows else np.zeros((0, 2), dtype=np.int64)
        with spans_path.open("wb") as handle:
            np.save(handle, index)
            handle.flush()
            os.fsync(handle.fileno())
        return {"layout": layout, "sha256": self._hash.hexdigest()}

    def _copy_into(self, out, part: Path) -> None:
        with part.open("rb") as handle:
            for block in iter(lambda: handle.read(COPY_BLOCK), b""):
                out.write(block)
                self._hash.update(block)
        part.unlink()

    def close(self) -> None:
        for handle in (*self.files.values(), *self.spans.values(), *([self._spill] if self._spill else [])):
            handle.close()  # closing twice is harmless

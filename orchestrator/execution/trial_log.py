"""A trial's own log: what it did, step by step, what it warned about and how it ended, written in the trial's
process and sent to the driver with its final result (so it reaches the tracking store on a cluster too);
the MLflow recorder attaches it to the trial's run as `trial.log`."""

from __future__ import annotations

import contextlib
import logging
import time
import traceback
from typing import Iterator

LIMIT = 1_000_000  # characters kept: the head and the tail of a longer log


class TrialLog:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.started = time.monotonic()

    def write(self, text: str) -> None:
        stamp = time.monotonic() - self.started
        self.lines.extend(f"[{stamp:9.1f}s] {line}" for line in str(text).splitlines() or [""])

    def failure(self, error: BaseException) -> None:
        self.write("FAILED:\n" + "".join(traceback.format_exception(type(error), error, error.__traceback__)))

    def text(self) -> str:
        text = "\n".join(self.lines) + "\n"
        if len(text) <= LIMIT:
            return text
        half = LIMIT // 2
        return f"{text[:half]}\n[... {len(text) - LIMIT} characters left out ...]\n{text[-half:]}"

    @contextlib.contextmanager
    def capturing(self) -> Iterator["TrialLog"]:
        """Python warnings and WARNING-or-worse log records of the trial's process go into the log too."""
        handler = _Handler(self)
        root = logging.getLogger()
        root.addHandler(handler)
        logging.captureWarnings(True)
        try:
            yield self
        finally:
            logging.captureWarnings(False)
            root.removeHandler(handler)


class _Handler(logging.Handler):
    def __init__(self, log: TrialLog):
        super().__init__(level=logging.WARNING)
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.log.write(f"{record.levelname} {record.name}: {record.getMessage()}")
        except Exception:  # a log line must never fail the trial
            pass

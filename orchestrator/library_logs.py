"""The libraries' log records go to the study's log file, never to the console.

MLflow, SQLAlchemy, Alembic and Ray each attach their own handler printing to the terminal, and a failing
store makes MLflow log every failed statement with its traceback: on a full disk a study's last paragraph came
after 25 screens of them. A command (`orchestrator run`, `evaluate`) calls `route_library_logs(file)` first:
every handler of a library logger that writes to a terminal stream is replaced by one handler appending to
the file, and the root logger writes there too (a logger without a handler would otherwise reach Python's
last-resort handler, which prints to stderr). `reroute()` repeats it after a library configured its loggers
again (`ray.init`, cluster.py). The file's own errors are swallowed: on a full disk it cannot be written
either, and a traceback about the log would be one more on the console. The console keeps the command's own
output (rich), which says where the file is. Standard library only.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_state: dict = {"handler": None, "removed": [], "added": []}


class _QuietFileHandler(logging.FileHandler):
    """Appends to the file, opened at the first record; an error writing it is dropped, not printed."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        pass


def _to_terminal(handler: logging.Handler) -> bool:
    return isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)


def route_library_logs(path: Path) -> Path | None:
    """Send the libraries' log records to `path` (created on the first record); returns it, or None where
    its folder cannot be made (the records are then dropped: the console stays one paragraph either way)."""
    written: Path | None = path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler: logging.Handler = _QuietFileHandler(path, delay=True, encoding="utf-8")
    except OSError:
        handler, written = logging.NullHandler(), None
    handler.setFormatter(logging.Formatter(_FORMAT))
    stop_routing()
    _state["handler"] = handler
    reroute()
    return written


def reroute() -> None:
    """Replace every terminal handler of every logger by the study's file handler (a no-op before
    `route_library_logs`)."""
    handler = _state["handler"]
    if handler is None:
        return
    root = logging.getLogger()
    loggers = [logger for logger in logging.root.manager.loggerDict.values() if isinstance(logger, logging.Logger)]
    for logger in [root, *loggers]:
        terminal = [existing for existing in logger.handlers if _to_terminal(existing)]
        for existing in terminal:
            logger.removeHandler(existing)
            _state["removed"].append((logger, existing))
        if terminal and not logger.propagate and handler not in logger.handlers:
            logger.addHandler(handler)  # it does not reach the root: give it the file itself
            _state["added"].append(logger)
    if handler not in root.handlers:
        root.addHandler(handler)
        _state["added"].append(root)


def stop_routing() -> None:
    """Close the file and give the loggers their own handlers back (a command run inside a Python process,
    as the tests do, leaves logging as it found it)."""
    handler = _state["handler"]
    if handler is None:
        return
    for logger in _state["added"]:
        logger.removeHandler(handler)
    for logger, existing in _state["removed"]:
        logger.addHandler(existing)
    handler.close()
    _state.update(handler=None, removed=[], added=[])


@contextmanager
def library_logs_to(path: Path) -> Iterator[Path | None]:
    """`route_library_logs(path)` while inside; yields the file (None where it cannot be made)."""
    try:
        yield route_library_logs(path)
    finally:
        stop_routing()

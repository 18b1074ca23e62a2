"""Ctrl-C while trials run: the first one stops the study cleanly, a second one at once.

Ray Tune catches SIGINT itself, stops, counts the stopped trials as not completed and prints how to resume
through `Tuner.restore` (which this tool does not use: a rerun of the same command resumes). Its handler is
switched off (TUNE_DISABLE_SIGINT_HANDLER) and this one installed instead while the Tuner runs: the first
Ctrl-C only sets a flag, which the Tuner reads through `ray_tune.InterruptStopper` and stops every trial;
the runner then closes their runs as KILLED and exits 130. A second Ctrl-C raises KeyboardInterrupt at once.
Nothing here imports Ray.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

_requested = threading.Event()


def requested() -> bool:
    """Whether Ctrl-C asked the study to stop (read by the Tuner's stopper and by the runner)."""
    return _requested.is_set()


def reset() -> None:
    _requested.clear()


@contextmanager
def graceful_interrupt(on_first: Callable[[], None]) -> Iterator[None]:
    """While inside: the first SIGINT sets the flag and calls `on_first` (say what happens), the next
    raises KeyboardInterrupt. Outside the main thread (where signals cannot be handled) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum, frame) -> None:
        if _requested.is_set():
            raise KeyboardInterrupt
        _requested.set()
        on_first()

    previous = signal.signal(signal.SIGINT, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)

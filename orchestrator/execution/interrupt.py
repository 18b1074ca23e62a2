"""Ctrl-C (SIGINT) and SIGTERM while trials run: the first one stops the study cleanly, a second one at once.

SIGTERM is what `kill`, `scancel`, a SLURM preemption and a time limit send; it takes the same path as Ctrl-C
and differs only in the exit code: 130 after Ctrl-C, 143 (128 + 15, the shell's convention for a process
ended by SIGTERM) after SIGTERM, both meaning "stopped cleanly, run the same command to resume".

Ray Tune catches SIGINT itself, stops, counts the stopped trials as not completed and prints how to resume
through `Tuner.restore` (which this tool does not use: a rerun of the same command resumes). Its handler is
switched off (TUNE_DISABLE_SIGINT_HANDLER) and this one installed instead while the Tuner runs: the first
signal only sets a flag, which the Tuner reads through `ray_tune.InterruptStopper` and stops every trial;
the runner then closes their runs as KILLED. A second signal raises KeyboardInterrupt (`Terminated` for
SIGTERM) at once, which takes the same path (runs KILLED, leases given back) without waiting for the trials.

Ray also wants SIGTERM: `ray.init` sets a Python handler (`sys.exit`) and, in the driver's core worker, a
native failure-signal handler (absl's, installed when the CoreWorker starts) that prints "*** SIGTERM
received ... PC: @ ..." stack lines and ends the process by SIGABRT. `stop_signals` makes this module the
owner of both signals for a whole command, and `reclaim` (called right after Ray is joined, cluster.py)
takes SIGTERM and SIGINT back: a Python handler replaces the native one (both are `sigaction`s). Outside the
Tuner (starting, waiting for another orchestrator's trials, evaluating) the first signal raises at once, as
Python's own Ctrl-C does. Nothing here imports Ray.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
_NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

_requested = threading.Event()
_state: dict = {"signal": None, "on_first": None, "owned": 0}


class Terminated(KeyboardInterrupt):
    """SIGTERM where Ctrl-C would raise KeyboardInterrupt: every `except KeyboardInterrupt` handles both."""


def requested() -> bool:
    """Whether a stop signal asked the study to stop (read by the Tuner's stopper and by the runner)."""
    return _requested.is_set()


def reset() -> None:
    _requested.clear()
    _state["signal"] = None


def cause() -> str:
    """What stopped the command, for its last paragraph: "Ctrl-C" or "SIGTERM"."""
    return _NAMES.get(_state["signal"], "Ctrl-C")


def exit_code() -> int:
    """130 after Ctrl-C, 143 after SIGTERM."""
    return EXIT_CODES.get(_state["signal"], 130)


def _handle(signum, frame) -> None:
    if _state["signal"] is None:
        _state["signal"] = signum
    first = not _requested.is_set()
    _requested.set()
    on_first = _state["on_first"]
    if first and on_first is not None:  # inside the Tuner: stop the trials, keep going until they are stopped
        on_first(_NAMES.get(signum, "a signal"))
        return
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _install() -> dict:
    return {signum: signal.signal(signum, _handle) for signum in _STOP_SIGNALS}


def _restore(previous: dict) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


@contextmanager
def stop_signals() -> Iterator[None]:
    """Own SIGINT and SIGTERM for a whole command (`orchestrator run`, `evaluate`): the first signal raises
    KeyboardInterrupt (Terminated for SIGTERM) unless the Tuner is running (`graceful_interrupt`)."""
    if not _in_main_thread():
        yield
        return
    reset()
    previous = _install()
    _state["owned"] += 1
    try:
        yield
    finally:
        _state["owned"] -= 1
        _restore(previous)


def reclaim() -> None:
    """Take the stop signals back after Ray installed its own handlers (`ray.init`); a no-op outside
    `stop_signals`/`graceful_interrupt` or outside the main thread."""
    if _state["owned"] and _in_main_thread():
        _install()


@contextmanager
def graceful_interrupt(on_first: Callable[[str], None]) -> Iterator[None]:
    """While inside: the first SIGINT or SIGTERM sets the flag and calls `on_first(what)` ("Ctrl-C",
    "SIGTERM": say what happens), the next raises. Outside the main thread (where signals cannot be handled)
    it does nothing."""
    if not _in_main_thread():
        yield
        return
    previous = _install()
    _state["owned"] += 1
    _state["on_first"] = on_first
    try:
        yield
    finally:
        _state["on_first"] = None
        _state["owned"] -= 1
        _restore(previous)

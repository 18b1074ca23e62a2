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

SIGTERM often reaches Ray's own processes too: a batch system (SLURM's `scancel`, a preemption) signals every
process of the job, and a terminal's process group holds the private Ray this command started. Ray's GCS is
then gone, the Tuner cannot stop its trials, and the driver's core worker ends the process after 60 s of
retries (exit 1, the runs left RUNNING), or the batch system kills it first. So the first signal also starts a
bounded wait (`STOP_GRACE_S`): if the command is still stopping then, `last_resort` (the runner's: close the
open runs as KILLED, give the leases back, close the parent run) runs from that thread for at most
`LAST_RESORT_S` and the process exits with the signal's code. The main thread may be blocked in Ray's native
code meanwhile, where no Python signal handler runs: a second signal would not help there.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
# Both within SLURM's default KillWait (30 s) between its SIGTERM and its SIGKILL, with room left for the job
# script's own stop (orchestrator/slurm/script.py `finish`): the process ends at most GRACE + LAST_RESORT after
# the first signal, also when the tracking server went down with the job and closing the runs cannot finish.
STOP_GRACE_S = 10.0
LAST_RESORT_S = 5.0
_NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

_requested = threading.Event()
_state: dict = {"signal": None, "on_first": None, "owned": 0, "last_resort": None, "timer": None}


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
        _start_grace()
        return
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _start_grace() -> None:
    if _state["last_resort"] is None or _state["timer"] is not None:
        return
    timer = threading.Timer(STOP_GRACE_S, _give_up)
    timer.daemon = True
    _state["timer"] = timer
    timer.start()


def _give_up() -> None:
    """Still stopping after STOP_GRACE_S: close what the runner can close, then end the process."""
    action = _state["last_resort"]
    if action is None:
        return
    said: dict[str, str] = {}

    def close() -> None:
        try:
            said["text"] = action(cause())
        except BaseException as error:  # the store may be gone too: the next run closes the runs as stale
            said["text"] = (f"Stopped by {cause()}; the open runs could not be closed ({type(error).__name__}): the "
                            "next run closes them as stale and resumes their trials.")

    # Bounded: a tracking server that stopped with the job (a SLURM job's own) would keep MLflow's client retrying
    # for minutes, past the batch system's SIGKILL.
    closing = threading.Thread(target=close, name="orchestrator-last-resort", daemon=True)
    closing.start()
    closing.join(LAST_RESORT_S)
    text = said.get("text") or (f"Stopped by {cause()}; the open runs could not be closed within {LAST_RESORT_S:.0f}s "
                                "(is the tracking store reachable?): the next run closes them as stale and resumes "
                                "their trials.")
    sys.stderr.write(f"{text}\n")
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(exit_code())


@contextmanager
def last_resort(action: Callable[[str], str]) -> Iterator[None]:
    """While inside: if a stop signal's clean stop takes longer than STOP_GRACE_S, `action(what)` runs from
    another thread (it closes the open runs and returns the last paragraph) and the process exits."""
    _state["last_resort"] = action
    try:
        yield
    finally:
        # A stop under way stays bounded after the Tuner returns: within a command (`stop_signals`), what follows
        # (closing the trial runs, the leases and the parent run) may hang on a tracking server that went down
        # with the job, so the timer and its action are kept until the command ends (`stop_signals` clears them).
        if not (_requested.is_set() and _state["timer"] is not None and _state["owned"] > 0):
            _clear_last_resort()


def _clear_last_resort() -> None:
    _state["last_resort"] = None
    timer, _state["timer"] = _state["timer"], None
    if timer is not None:
        timer.cancel()


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
        if not _state["owned"]:
            _clear_last_resort()  # the command ended: a stop's bound (`last_resort`) ends with it
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

"""A stop signal's bound (orchestrator/execution/interrupt.py): once the first SIGTERM asked the study to stop,
the process ends within STOP_GRACE_S + LAST_RESORT_S even where the Tuner returned at once (Ray's processes were
signalled too) and closing the runs then hangs on a tracking server that went down with the job (a SLURM job's
own: scancel signals every process of the job). The process's end is observed through os._exit."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from orchestrator.execution import interrupt


@pytest.fixture
def exits(monkeypatch):
    codes: list[int] = []
    ended = threading.Event()

    def observed_exit(code: int) -> None:  # the process would end here; the test only records it
        codes.append(code)
        ended.set()

    monkeypatch.setattr(interrupt, "STOP_GRACE_S", 0.3)
    monkeypatch.setattr(interrupt, "LAST_RESORT_S", 0.3)
    monkeypatch.setattr(interrupt.os, "_exit", observed_exit)
    return codes, ended


def _stop_inside_the_tuner(closed: list[str]) -> None:
    with interrupt.last_resort(lambda what: closed.append(what) or f"closed after {what}"):
        with interrupt.graceful_interrupt(lambda what: None):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler runs here: the flag set, the bound started
            assert interrupt.requested()


def test_closing_the_runs_after_the_tuner_returned_stays_bounded(exits):
    codes, ended = exits
    closed: list[str] = []
    with interrupt.stop_signals():
        _stop_inside_the_tuner(closed)
        # The Tuner returned; the runner now closes the runs, which hangs (here: waits) on a dead server.
        assert ended.wait(5), "the stop was not bounded once the Tuner had returned"
    assert codes == [143] and closed == ["SIGTERM"]


def test_a_stop_that_ends_in_time_leaves_no_bound_behind(exits):
    codes, ended = exits
    closed: list[str] = []
    with interrupt.stop_signals():
        _stop_inside_the_tuner(closed)
    # The command ended within the grace (runs closed, parent run closed): nothing fires later.
    assert not ended.wait(1) and codes == [] and closed == []
    interrupt.reset()


def test_outside_a_command_the_bound_ends_with_the_tuner(exits):
    codes, ended = exits
    closed: list[str] = []
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        _stop_inside_the_tuner(closed)  # run_study called directly (a library use, a test): no stop_signals
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert not ended.wait(1) and codes == [] and closed == []
    interrupt.reset()

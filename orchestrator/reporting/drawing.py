"""The report's figures drawn side by side: each figure's function run in a process of its own, forked from this
one (so it has the data and the loaded matplotlib already, and sends back only its small result: the `Plot`),
as many at once as this process may use cores. Drawing is most of a report's time (a 240-row study: four
fifths, in matplotlib's text and tick layout, which one core draws one figure at a time).

The figures are the same files either way: each is drawn by the same function from the same data, and the
results come back in the order of the functions. A process is forked only where that is safe: the platform
forks, and this process runs no other thread (a lock another thread held at the fork would stay held in the
child: Ray's driver, after `orchestrator run` trained, has threads, and its report is drawn here, one figure
after the other). A figure whose process failed is drawn again here, where its error is raised as it would
have been."""

from __future__ import annotations

import multiprocessing
import os
import threading
from multiprocessing.connection import Connection, wait
from typing import Callable, Sequence, TypeVar, cast

T = TypeVar("T")


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def can_fork() -> bool:
    return "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1


def draw(jobs: Sequence[Callable[[], T]], workers: int | None = None) -> list[T]:
    """Each job's result, in order; up to `workers` (default: the usable cores) jobs at once in forked processes,
    else one after the other here."""
    workers = min(workers or usable_cores(), len(jobs))
    if workers < 2 or not can_fork():
        return [job() for job in jobs]
    context = multiprocessing.get_context("fork")
    results: dict[int, T] = {}
    running: dict[Connection, tuple[int, multiprocessing.process.BaseProcess]] = {}
    pending = list(enumerate(jobs))
    while pending or running:
        while pending and len(running) < workers:
            index, job = pending.pop(0)
            receive, send = context.Pipe(duplex=False)
            process = context.Process(target=_child, args=(job, send), daemon=True)
            process.start()
            send.close()  # the child's end: EOF here once it is gone
            running[receive] = (index, process)
        for ready in wait(list(running)):
            answer = cast(Connection, ready)
            index, child = running.pop(answer)
            try:
                drawn, result = answer.recv()
            except EOFError:  # the process died before it answered
                drawn, result = False, None
            answer.close()
            child.join()
            results[index] = cast(T, result) if drawn else jobs[index]()
    return [results[index] for index in range(len(jobs))]


def _child(job: Callable[[], object], send: Connection) -> None:
    try:
        result = (True, job())
    except BaseException:  # drawn again by the parent, which raises the error
        result = (False, None)
    send.send(result)
    send.close()

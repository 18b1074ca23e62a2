"""An ordered, bounded parallel map over worker processes.

`multiprocessing.Pool.imap` would do the ordering, but its feeder thread drains the input iterator as fast
as it can: on a corpus larger than memory the queued input alone would exhaust RAM. Here at most `window`
tasks are in flight, and results come back in submission order, so the output file is the same whatever
the number of workers.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from collections import deque
from typing import Any, Callable, Iterable, Iterator, TypeVar

Task = TypeVar("Task")


def _single_threaded() -> bool:
    """Whether this process runs one thread: its OS threads where Linux lists them (Ray's and gRPC's threads are
    not Python's), else Python's."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return threading.active_count() == 1


def _context():
    """fork starts a worker in milliseconds (no re-import of torch), but a process forked while other threads run
    (Ray's, gRPC's, a progress monitor's) can be left waiting forever on a lock one of them held: so fork only a
    single-threaded process; else a fork server (a fresh single-threaded process the workers are forked from),
    and elsewhere than Linux the platform's default."""
    if sys.platform.startswith("linux") and _single_threaded():
        return multiprocessing.get_context("fork")
    if "forkserver" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("forkserver")
    return multiprocessing.get_context()


def ordered_map(function: Callable[[Any], Any], tasks: Iterable[tuple[Task, Any]], workers: int,
                initializer: Callable[..., None], initargs: tuple = (),
                window: int | None = None) -> Iterator[tuple[Task, Any]]:
    """(tag, function(payload)) for each (tag, payload) of `tasks`, in order; tags stay in this process.

    workers=1 runs in this process (no pickling, and what a one-core measurement should measure).
    """
    if workers <= 1:
        initializer(*initargs)
        for tag, payload in tasks:
            yield tag, function(payload)
        return
    window = window or 2 * workers
    with _context().Pool(workers, initializer=initializer, initargs=initargs) as pool:
        pending: deque = deque()
        for tag, payload in tasks:
            pending.append((tag, pool.apply_async(function, (payload,))))
            if len(pending) >= window:
                tag_done, result = pending.popleft()
                yield tag_done, result.get()
        while pending:
            tag_done, result = pending.popleft()
            yield tag_done, result.get()

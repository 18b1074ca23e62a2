"""Progress of a long data preparation: a rich progress bar on a terminal, or nothing.

The preparation reports input bytes consumed (on disk, so compressed inputs count what was read); the bar
shows the share done, the throughput and the time left.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Protocol


class Progress(Protocol):
    def stage(self, description: str, total: int | None) -> None: ...

    def advance(self, amount: int) -> None: ...


class NoProgress:
    def stage(self, description: str, total: int | None) -> None:
        pass

    def advance(self, amount: int) -> None:
        pass


class RichProgress:
    """One bar per stage (training the tokenizer, tokenizing), in bytes."""

    def __init__(self, bar):
        self._bar, self._task = bar, None

    def stage(self, description: str, total: int | None) -> None:
        if self._task is not None:
            self._bar.update(self._task, completed=self._bar.tasks[self._task].total or 0)
            self._bar.stop_task(self._task)
        self._task = self._bar.add_task(description, total=total)

    def advance(self, amount: int) -> None:
        if self._task is not None and amount:
            self._bar.advance(self._task, amount)


@contextmanager
def rich_progress() -> Iterator[RichProgress]:
    from rich.progress import BarColumn, DownloadColumn, TextColumn, TimeRemainingColumn, TransferSpeedColumn
    from rich.progress import Progress as Bar

    bar = Bar(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
              TimeRemainingColumn())
    with bar:
        reporter = RichProgress(bar)
        yield reporter
        if reporter._task is not None:
            task = bar.tasks[reporter._task]
            bar.update(reporter._task, completed=task.total or task.completed)

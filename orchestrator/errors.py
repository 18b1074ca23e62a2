"""Errors that stop a study before its end for a reason outside the study: a service it needs is unreachable.

Nothing is lost when they happen (finished trials are in the tracking store), so the command line reports them
as one paragraph, without a traceback, and exits with `exit_code`: running the same command again resumes.
"""

from __future__ import annotations

from typing import Iterator


class ServiceUnreachable(RuntimeError):
    exit_code = 3  # interrupted, resumable


class TrackingServerUnreachable(ServiceUnreachable):
    pass


class RayClusterUnreachable(ServiceUnreachable):
    pass


def exception_chain(error: BaseException) -> Iterator[BaseException]:
    """The error and every error behind it (`raise ... from`, or raised while handling), each once."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def last_error_line(trace: str | None) -> str:
    """The exception line of an error trace ("ValueError: ..."), which is what a researcher needs first."""
    if not trace:
        return ""
    lines = [line.strip() for line in str(trace).strip().splitlines() if line.strip()]
    for line in reversed(lines):
        head = line.split(":")[0]
        if head.endswith(("Error", "Exception")) or "Error(" in head:
            return line
    return lines[-1]

"""Errors that stop a command for a reason outside the study file, each reported by the command line as one
paragraph (no traceback) with its own exit code:

- `UserInputError` (exit 2): something the user gave must change first: a study's resources no node can
  host, a tracking store that is corrupt, empty, read-only or holds a foreign experiment of the study's name.
  Re-running the same command would fail the same way, so no "re-run to resume" advice goes with it.
- `ServiceUnreachable` (exit 3): a service the study needs is down or did not answer in time (the tracking
  server, the Ray cluster, an autoscaler that never added a node, a SQLite store another process kept
  locked). Nothing is lost: finished trials are in the tracking store, and running the same command again
  resumes.
- `StudyInterrupted` (exit 130): Ctrl-C stopped the study cleanly; running the same command again resumes.
  `StudyTerminated` (exit 143): the same after SIGTERM (kill, scancel, a preemption: execution/interrupt.py).
"""

from __future__ import annotations

from typing import Iterator


class OrchestratorError(RuntimeError):
    """An error the command line reports as `title` and one paragraph, exiting with `exit_code`."""

    exit_code = 1
    title = "Stopped"


class UserInputError(OrchestratorError):
    exit_code = 2
    title = "Cannot run:"


class ResourcesUnavailable(UserInputError):
    """No node of the Ray cluster can host one trial of the study (resources.cpus/gpus)."""


class StoreUnusable(UserInputError):
    """The tracking store cannot be used: corrupt, empty, not writable, or the study's name is taken there."""

    title = "Error:"


class ForeignExperiment(StoreUnusable):
    """The store has an experiment of the study's name that this tool did not create."""


class StaleTrials(UserInputError):
    """Finished trials of the study were computed by other code than the current (tracking/code_check.py): `run`
    neither reuses nor retrains them without being told which (--retrain-stale, --keep-stale)."""

    title = "Code changed:"


class ServiceUnreachable(OrchestratorError):
    exit_code = 3  # interrupted, resumable
    title = "Stopped:"  # before the message, which names the service and what failed


class TrackingServerUnreachable(ServiceUnreachable):
    pass


class RayClusterUnreachable(ServiceUnreachable):
    pass


class StoreLocked(ServiceUnreachable):
    """Another process held the SQLite store's lock past SQLite's wait: the store is busy, not damaged."""

    title = "Store busy:"


class ResourcesNotArrived(ServiceUnreachable):
    """An autoscaling cluster did not add a node that can host a trial within the bounded wait."""


class StudyInterrupted(OrchestratorError):
    exit_code = 130
    title = "Interrupted"


class StudyTerminated(StudyInterrupted):
    """SIGTERM (kill, scancel, a SLURM preemption or time limit) stopped the study cleanly, as Ctrl-C does."""

    exit_code = 143  # 128 + SIGTERM: what a shell reports for a process SIGTERM ended


def exception_chain(error: BaseException | None) -> Iterator[BaseException]:
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

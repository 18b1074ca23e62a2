"""One command's study, from its STUDY argument: located, loaded with its profile and overrides, with its output
folders and tracking store chosen. Every command that reads a study starts here, so that a bad argument gets
the same message and exit code (2) from each, and nothing runs before the input is checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape

from .output import EXIT_INVALID, TRACKING_FLAG, stop

if TYPE_CHECKING:
    from ..study import Study
    from ..tracking.store import StudyStore
    from ..tracking.uri import StoreChoice


def locate(argument: str) -> Path:
    """The study file of a STUDY argument (a path, or a name in studies/): study/locate.py's rule; exit 2."""
    from ..study import StudyError
    from ..study.locate import study_file

    try:
        return study_file(argument)
    except StudyError as error:
        stop(f"[red]Invalid study[/red] {escape(str(error))}", EXIT_INVALID)


def load(path: Path, profile: str | None = None, overrides: list[str] | None = None, check_data: bool = False,
         feasible: bool = False, local_memory: float | None = None) -> Study:
    """The validated study, or exit 2 with every problem. `check_data` (run, plan, validate, ...): the data files
    the trials would read must exist too. `feasible` (validate, plan, run): every trial can finish
    (planning/feasibility.py; CPU trials' memory against `local_memory`, None: not checked)."""
    from ..planning.feasibility import check
    from ..study import StudyError, load_study, parse_override

    try:
        parsed = dict(parse_override(text) for text in overrides or [])
    except ValueError as error:
        stop(f"[red]Invalid argument[/red]: {error}", EXIT_INVALID)
    try:
        return load_study(path, profile=profile, overrides=parsed, check_data=check_data,
                          feasibility=check(local_memory) if feasible else None)
    except StudyError as error:
        stop(f"[red]Invalid study[/red] {escape(str(error))}", EXIT_INVALID)


def writable(folder: Path, option: str) -> Path:
    """`folder`, created if need be, or exit 2 where it cannot be written: checked before anything runs, not
    after the study's last trial."""
    from ..folders import unwritable

    error = unwritable(folder)
    if error is not None:
        stop(f"[red]Invalid option[/red] {option}: cannot write into {escape(str(folder))} "
             f"({escape(error.strerror or str(error))}). Nothing was run.", EXIT_INVALID)
    return folder


@dataclass
class Invocation:
    """A command's study and where it reads and writes: the STUDY argument's file, the study loaded with the
    profile and overrides given, and the --tracking-uri given (None: the study's default store)."""

    study_path: Path
    study: Study
    profile: str | None = None
    overrides: tuple[str, ...] = ()
    tracking_flag: str | None = None

    @classmethod
    def load(cls, argument: str, profile: str | None = None, overrides: list[str] | None = None,
             tracking_uri: str | None = None, check_data: bool = False, data_note: bool = False,
             feasible: bool = False, local_memory: float | None = None) -> Invocation:
        """Locate the study, then load it (exit 2 with every problem where either fails). `data_note` (plan,
        slurm --dry-run: commands that size the study without reading its data): data not prepared yet is said
        in one line on stderr instead of refused. `feasible`, `local_memory`: the feasibility check (`load`)."""
        path = locate(argument)
        invocation = cls(path, load(path, profile, overrides, check_data and not data_note, feasible, local_memory),
                         profile, tuple(overrides or ()), tracking_uri)
        if data_note:
            from ..study.data_paths import unprepared_data, unprepared_line
            from .output import err

            problems = unprepared_data(invocation.study)
            if problems:
                err.print(f"[yellow]Note[/yellow]: {escape(unprepared_line(problems))}")
        return invocation

    @classmethod
    def at(cls, path: Path, profile: str | None = None, overrides: list[str] | None = None,
           tracking_uri: str | None = None, check_data: bool = False) -> Invocation:
        """The study of a file already located (`evaluate` reads its --lengths in between)."""
        return cls(path, load(path, profile, overrides, check_data), profile, tuple(overrides or ()), tracking_uri)

    @cached_property
    def store_choice(self) -> StoreChoice:
        """The tracking store: --tracking-uri, else MLFLOW_TRACKING_URI, else the study's project store."""
        from ..tracking.uri import choose_store

        return choose_store(self.tracking_flag, self.study_path)

    @property
    def uri(self) -> str:
        return self.store_choice.uri

    def folder(self, given: Path | None, name: str) -> Path:
        """An output folder: the one given, else `name` in the study's project folder (study/locate.py)."""
        from ..study.locate import project_folder

        return given if given is not None else project_folder(self.study_path) / name

    def writable_folder(self, given: Path | None, name: str, option: str) -> Path:
        """`folder(given, name)`, or exit 2 where it cannot be written (`option` names it in the message)."""
        return writable(self.folder(given, name), option)

    def reports_folder(self, given: Path | None) -> Path:
        """Where this store's reports go: --reports-dir, else the store's own folder (tracking/uri.py
        `reports_root`: the project's reports/ for the project's store, never for another store)."""
        from ..folders import unwritable
        from ..tracking.uri import reports_root

        if given is not None:
            return given
        folder = reports_root(self.uri, self.study_path)
        if unwritable(folder) is not None:  # beside a read-only store: in the project's reports/, by the store's name
            return reports_root(self.uri, self.study_path, beside=False)
        return folder

    def writable_reports(self, given: Path | None) -> Path:
        """`reports_folder(given)`, or exit 2 where it cannot be written. Where the folder follows from a SQLite
        store (none given) that does not exist yet, the folder it will be created in is checked first, so that
        the message names the cause; an existing store in a read-only folder (an archive) is read, its reports
        going to the project's reports/store-<name>/ (`reports_folder`)."""
        if given is None:
            from ..errors import StoreUnusable
            from ..tracking.sqlite_file import check_folder_writable
            from ..tracking.uri import sqlite_path

            database = sqlite_path(self.uri)
            if database is not None and not database.expanduser().exists():
                try:
                    check_folder_writable(database.expanduser())
                except StoreUnusable as error:
                    stop(f"[red]Unusable tracking store[/red]: {escape(str(error))}", EXIT_INVALID)
        return writable(self.reports_folder(given), "--reports-dir")

    def stored(self) -> StudyStore | None:
        """The study's store for reading, or None where the study has not run there yet (nothing is created)."""
        from ..tracking.lookup import StudyNotFound
        from ..tracking.store import StudyStore

        try:
            return StudyStore.open(self.uri, self.study.name)
        except StudyNotFound:
            return None

    def stored_or_exit(self, title: str) -> StudyStore:
        """The study's store, or exit 2 saying where it was looked for: the study has not run in this store,
        an argument to change, not an outage."""
        from ..tracking.lookup import StudyNotFound
        from ..tracking.store import StudyStore

        choice = self.store_choice
        try:
            return StudyStore.open(choice.uri, self.study.name, choice.how)
        except StudyNotFound as error:
            stop(f"[red]{title}[/red] {escape(error.describe(TRACKING_FLAG))}", EXIT_INVALID)

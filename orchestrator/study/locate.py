"""Where a study file is, and its project folder: the one rule every command and `load_results` follow.

- A study argument is a path when that file exists or the argument ends in `.yaml`/`.yml`; otherwise it is
  a study's name, looked up as `studies/<name>.yaml` under the current folder.
- A study's project folder is the folder that holds its `studies/` folder (`/p` for `/p/studies/x.yaml`);
  a study file elsewhere has the current folder as its project folder. The embedded tracking store
  defaults to `<project folder>/mlruns/mlflow.db` (tracking/uri.py), so a study is found from any folder.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from .problems import StudyError, did_you_mean

STUDIES_FOLDER = "studies"
SUFFIXES = (".yaml", ".yml")


def names_a_file(argument: str | Path) -> bool:
    """True when the argument is a study file's path rather than a study's name."""
    return Path(argument).is_file() or str(argument).endswith(SUFFIXES)


def folder_problem(path: Path) -> str:
    """What is wrong with a folder given where a study file was expected (and which files it holds)."""
    found = sorted(p.name for p in path.glob("*.y*ml"))[:8]
    inside = f" (it holds {', '.join(found)})" if found else ""
    return f"(file): {path} is a folder, not a study file; name a YAML file{inside}"


def not_a_file_problem(path: Path) -> str:
    """What is wrong with a path that is neither a regular file nor a folder, named for what it is: a symlink
    loop, a broken symlink, a FIFO, socket or device, an unreadable place, or nothing at all. Never raises (a
    loop makes `Path.resolve` raise on Python 3.11)."""
    where = os.path.abspath(path)
    try:
        mode = path.stat().st_mode
    except OSError as error:
        if error.errno == errno.ELOOP:
            return (f"(file): {path} is a symlink loop (its links lead back to themselves, never to a file); "
                    "point it at the study file")
        if error.errno == errno.ENOENT and path.is_symlink():
            return f"(file): {path} is a broken symlink (it points at {os.readlink(path)}, which does not exist)"
        if error.errno in (errno.ENOENT, errno.ENOTDIR):
            return f"(file): no such study file ({where})"
        return f"(file): cannot be read: {error.strerror or error} ({where})"
    kind = ("a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file")
    return f"(file): {path} is {kind}, not a regular file; name a YAML study file"


def study_file(argument: str | Path, cwd: Path | None = None) -> Path:
    """The study file an argument names (a path, or a name looked up in studies/); StudyError naming every
    place tried when there is none."""
    if Path(argument).is_dir():
        raise StudyError(str(argument), [folder_problem(Path(argument))])
    if names_a_file(argument):
        path = Path(argument)
        if not path.is_file():
            raise StudyError(str(argument), [not_a_file_problem(path)])
        return path
    candidate = (cwd or Path.cwd()) / STUDIES_FOLDER / f"{argument}.yaml"
    if candidate.is_file():
        return candidate
    known = sorted(path.stem for path in candidate.parent.glob("*.yaml"))
    there = f" The studies there: {', '.join(known)}{did_you_mean(str(argument), known)}." if known else ""
    raise StudyError(str(argument), [
        f"(file): no such study: {argument!r} is neither a file nor a study in {candidate.parent} "
        f"(tried {candidate}). Give the study file's path, or the name of a file in studies/.{there}"])


def project_folder(study_path: str | Path | None, cwd: Path | None = None) -> Path:
    """The folder holding the study file's `studies/` folder, else the current folder."""
    if study_path is not None:
        parent = Path(study_path).resolve().parent
        if parent.name == STUDIES_FOLDER:
            return parent.parent
    return (cwd or Path.cwd()).resolve()

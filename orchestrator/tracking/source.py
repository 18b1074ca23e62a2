"""Which code a study ran: the orchestrator's git commit, whether the checkout had uncommitted changes and a
hash of them, as MLflow's own source tags (`mlflow.source.*`, which its UI shows as a run's Source) on the
study's parent run and on every trial run, plus `code_version` (the short commit, "-dirty-<hash>" when
changed) and `code_diff_sha256`.

Uncommitted changes are the diff of the tracked files against HEAD (staged or not) and the untracked files
git does not ignore (a new module is code too); their hash is the SHA-256 of that diff and of each untracked
file's path, size and content (its size alone beyond 1 MiB), so two runs with the same hash ran the same
code. Outside a git checkout (an installed package) the commit is "unknown" and the installed version is
named instead.
"""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

# MLflow's names (mlflow.utils.mlflow_tags), spelled out so that reading them does not import MLflow;
# tests/test_provenance.py checks them against MLflow's constants.
SOURCE_NAME_TAG = "mlflow.source.name"
SOURCE_TYPE_TAG = "mlflow.source.type"
GIT_COMMIT_TAG = "mlflow.source.git.commit"
GIT_BRANCH_TAG = "mlflow.source.git.branch"
GIT_DIRTY_TAG = "mlflow.source.git.dirty"
GIT_REPO_URL_TAG = "mlflow.source.git.repoURL"
SOURCE_TYPE = "LOCAL"  # mlflow.entities.SourceType: a command run on this machine (not a notebook or a job)
CODE_VERSION_TAG = "code_version"
DIFF_HASH_TAG = "code_diff_sha256"
DIFF_FILE = "uncommitted.diff"  # the parent run's artifact where the checkout was dirty
_GIT_TIMEOUT_S = 10
_HASHED_BYTES = 1 << 20


@dataclass(frozen=True)
class CodeSource:
    commit: str  # full hash, or "unknown"
    dirty: bool = False
    diff: str = ""  # the uncommitted changes: `git apply` on the commit recreates the checkout (files <= 1 MiB)
    diff_sha256: str = ""
    branch: str = ""
    repo_url: str = ""
    root: Path | None = None  # the checkout's top folder

    @property
    def version(self) -> str:
        """`code_version`: the short commit, with "-dirty-<first 8 of the diff's hash>" when changed."""
        if self.commit == "unknown":
            return _installed_version()
        return self.commit[:7] + (f"-dirty-{self.diff_sha256[:8]}" if self.dirty else "")

    def source_name(self, study_path: Path | None) -> str:
        """What the run ran: the study file, relative to the checkout where it lies inside it."""
        if study_path is None:
            return "orchestrator"
        path = Path(study_path).resolve()
        if self.root is not None and path.is_relative_to(self.root):
            return str(path.relative_to(self.root))
        return str(path)

    def tags(self, study_path: Path | None = None) -> dict[str, str]:
        tags = {SOURCE_NAME_TAG: self.source_name(study_path), SOURCE_TYPE_TAG: SOURCE_TYPE,
                GIT_COMMIT_TAG: self.commit, GIT_DIRTY_TAG: str(self.dirty).lower(), CODE_VERSION_TAG: self.version}
        if self.branch:
            tags[GIT_BRANCH_TAG] = self.branch
        if self.repo_url:
            tags[GIT_REPO_URL_TAG] = self.repo_url
        if self.dirty:
            tags[DIFF_HASH_TAG] = self.diff_sha256
        return tags


def _git(folder: Path, *args: str, ok: tuple[int, ...] = (0,)) -> str | None:
    try:
        done = subprocess.run(["git", *args], capture_output=True, cwd=folder, timeout=_GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.decode("utf-8", errors="replace") if done.returncode in ok else None


def _new_file_diff(root: Path, name: str) -> str:
    """An untracked file as a diff that creates it (git apply recreates it); "" where it is beyond
    _HASHED_BYTES. `git diff --no-index` exits 1 when the sides differ, as they do here."""
    path = root / name
    if not path.is_file() or path.stat().st_size > _HASHED_BYTES:
        return ""
    return _git(root, "diff", "--no-index", "--binary", "--", "/dev/null", name, ok=(0, 1)) or ""


def _installed_version() -> str:
    try:
        return f"unknown (installed {metadata.version('dape-orchestrator')})"
    except metadata.PackageNotFoundError:
        return "unknown"


def _untracked_stamp(path: Path) -> str:
    """An untracked file's size and content hash; beyond _HASHED_BYTES (a data file left in the checkout) its
    size alone, so that a run never reads gigabytes to describe its code."""
    try:
        size = path.stat().st_size
        if size > _HASHED_BYTES:
            return f"{size} bytes, not hashed"
        return f"{size} bytes, sha256 {hashlib.sha256(path.read_bytes()).hexdigest()[:16]}"
    except OSError:
        return "unreadable"


def code_source(folder: Path | None = None) -> CodeSource:
    """The git state of the checkout holding `folder` (default: this package's own)."""
    folder = Path(folder) if folder is not None else Path(__file__).resolve().parent
    commit = (_git(folder, "rev-parse", "HEAD") or "").strip()
    if not commit:
        return CodeSource("unknown")
    root = Path((_git(folder, "rev-parse", "--show-toplevel") or str(folder)).strip())
    tracked = _git(root, "diff", "HEAD", "--binary") or ""
    untracked = [name for name in (_git(root, "ls-files", "--others", "--exclude-standard", "-z") or "").split("\0")
                 if name]
    digest = hashlib.sha256(tracked.encode())
    listing = []
    for name in sorted(untracked):
        stamp = _untracked_stamp(root / name)
        digest.update(b"\0untracked\0" + name.encode() + b"\0" + stamp.encode())
        listing.append(f"untracked: {name} ({stamp})")
    dirty = bool(tracked or untracked)
    branch = (_git(root, "rev-parse", "--abbrev-ref", "HEAD") or "").strip()
    remote = (_git(root, "config", "--get", "remote.origin.url") or "").strip()
    # The artifact: the tracked diff, then each untracked file as a diff creating it, then the listing.
    diff = tracked + "".join(_new_file_diff(root, name) for name in sorted(untracked)) + \
        ("\n".join(listing) + "\n" if listing else "")
    return CodeSource(commit, dirty, diff if dirty else "", digest.hexdigest() if dirty else "",
                      "" if branch == "HEAD" else branch, remote, root)

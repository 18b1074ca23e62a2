"""The code in a trial's identity: a fingerprint of the code a trial executes, so that a finished trial is reused
only by the same code (issue 43).

What counts: every module of the model library (each `.py` file under the installed `dape_core` package,
enumerated when the fingerprint is taken, never from a list) and the source of each plugin the study loads
(its `.py` file, or the file of a plugin module). The orchestrator's own code does not count: it schedules and
records trials but computes none of their numbers.

Each file is hashed as its syntax tree (`ast.dump`, docstrings removed), so that comments, docstrings, blank
lines and formatting do not change it, and any change to a statement, a name or a literal does. A file that
does not parse is hashed as its bytes. The files are read as they are on disk: a dirty checkout counts as what
it is. The fingerprint is the hash of the sorted (file, hash) pairs; the per-file hashes are kept beside it so
that two fingerprints name the files that differ (`changed_files`).

It is taken once per process (the library's part is cached; a plugin's part is its source's), by the driver:
the trial processes run the driver's plugins (shipped) and the same installed library. Across processes, each
file's normalised hash is kept by its bytes' hash (`HashCache`: in the user's cache folder), so that a command
parses only the files that changed since one last did (a finished study run again starts sooner); the bytes
are always read, so a file changed on disk is always seen.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

FILE_HASH_CHARS = 12
DIGEST_CHARS = 16
NORMALISATION = "sha256 of ast.dump of each .py file, docstrings removed (comments and formatting do not count)"


@dataclass(frozen=True)
class CodeFingerprint:
    """A trial's code: each file's normalised hash, by name (`dape_core/model.py`, `plugin:my_conv`)."""

    files: dict[str, str] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        canonical = "\n".join(f"{name}\0{value}" for name, value in sorted(self.files.items()))
        return hashlib.sha256(canonical.encode()).hexdigest()[:DIGEST_CHARS]

    def to_json(self) -> str:
        return json.dumps({"fingerprint": self.digest, "normalisation": NORMALISATION, "files": self.files},
                          indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "CodeFingerprint":
        return cls(dict(json.loads(text)["files"]))


def changed_files(old: CodeFingerprint, new: CodeFingerprint) -> list[str]:
    """The files whose code differs between two fingerprints: changed, added ("(new)") or removed ("(removed)")."""
    names = sorted(set(old.files) | set(new.files))
    return [name + (" (new)" if name not in old.files else " (removed)" if name not in new.files else "")
            for name in names if old.files.get(name) != new.files.get(name)]


def normalised_hash(source: str, name: str = "<source>") -> str:
    """The hash of a module's code: its syntax tree without docstrings (its bytes where it does not parse)."""
    try:
        tree = ast.parse(source, name)
    except (SyntaxError, ValueError):
        return "raw-" + hashlib.sha256(source.encode()).hexdigest()[:FILE_HASH_CHARS - 4]
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                node.body = node.body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()[:FILE_HASH_CHARS]


def library_root() -> Path:
    import dape_core

    return Path(dape_core.__file__).resolve().parent


class HashCache:
    """Normalised hashes by the sha256 of a file's bytes, kept in a JSON file between processes (the syntax tree
    is what takes the time: a tenth of a second per ten files). The key is the bytes' whole hash, so an entry
    is never stale; the file names the normalisation and Python's version (whose `ast.dump` the hash reads), and
    one of another normalisation, damaged or unwritable is ignored (the hashes are then computed)."""

    KEPT = 2000  # entries kept, the latest used first (several checkouts and versions of the library)

    def __init__(self, path: Path | None):
        self.path, self.added = path, False
        self.used: dict[str, str] = {}  # this process's files, kept first
        self.known: dict[str, str] = {}
        try:
            stored = json.loads(path.read_text(encoding="utf-8")) if path is not None else {}
            if stored.get("normalisation") == NORMALISATION and isinstance(stored.get("hashes"), dict):
                self.known = {str(key): str(value) for key, value in stored["hashes"].items()}
        except (OSError, ValueError, AttributeError):
            pass

    @staticmethod
    def default_path() -> Path:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        return base / "dape-orchestrator" / f"code_hashes-py{sys.version_info[0]}.{sys.version_info[1]}.json"

    def hash(self, data: bytes, name: str) -> str:
        key = hashlib.sha256(data).hexdigest()
        value = self.known.get(key)
        if value is None:
            text = data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")  # as read_text
            value, self.added = normalised_hash(text, name), True
        self.used[key] = value
        return value

    def save(self) -> None:
        if not self.added or self.path is None:
            return
        kept = {**self.used, **{k: v for k, v in self.known.items() if k not in self.used}}
        write_cache(self.path, json.dumps({"normalisation": NORMALISATION,
                                           "hashes": dict(list(kept.items())[:self.KEPT])}))


def write_cache(path: Path, text: str) -> None:
    """A cache file of ~/.cache/dape-orchestrator written whole or not at all (whichever process writes last);
    one that cannot be written is left alone (the next process computes its values again)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        partial.write_text(text, encoding="utf-8")
        os.replace(partial, path)
    except OSError:
        pass


@lru_cache(maxsize=4)
def _library_files(root: Path) -> tuple[tuple[str, str], ...]:
    cache = HashCache(HashCache.default_path())
    files = []
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        name = f"{root.name}/{path.relative_to(root).as_posix()}"
        files.append((name, cache.hash(path.read_bytes(), name)))
    cache.save()
    return tuple(files)


@lru_cache(maxsize=64)
def _plugin_hash(source: str) -> str:
    return normalised_hash(source)


def _plugin_source(payload: dict) -> str:
    if payload.get("source"):
        return payload["source"]
    try:
        return Path(payload["path"]).read_text(encoding="utf-8")
    except OSError:  # a module plugin not readable here: its source hash stands for it
        return payload.get("sha256", "")


def code_fingerprint(plugins: list[dict] | tuple = (), root: Path | None = None) -> CodeFingerprint:
    """The fingerprint of the library (`root`: dape_core's folder) with the study's plugins (their payloads,
    dape_core/plugins.py). Cached per process: the library is read once, each plugin's source once."""
    files = dict(_library_files(root or library_root()))
    for payload in plugins or ():
        files[f"plugin:{payload['module']}"] = _plugin_hash(_plugin_source(payload))
    return CodeFingerprint(files)


def forget_cached() -> None:
    """Read the files again at the next fingerprint (a long-lived process whose library changed on disk)."""
    _library_files.cache_clear()


def on_disk(plugins: list[dict] | tuple = ()) -> CodeFingerprint:
    """The fingerprint of the code as it is on disk now: the library read again, each file plugin's file read
    again (not the source the study loaded). A long command (`run --decide`'s looks) compares it with the one
    it started with (`changed_since`)."""
    forget_cached()
    return code_fingerprint([{**payload, "source": ""} for payload in plugins or ()])


def changed_since(start: CodeFingerprint, plugins: list[dict] | tuple = ()) -> list[str]:
    """The files whose code changed on disk since `start` was taken ([] where none did)."""
    return changed_files(start, on_disk(plugins))

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
the trial processes run the driver's plugins (shipped as source: a plugin file edited during a run cannot
reach them) and the same installed library, which Python imports lazily. So each trial's process checks its
own files on disk against the driver's (`changed_while_running`) at its first reported step (its model built)
and again before it reports its result (orchestrator/execution/trainable.py): a trial whose files changed in
between fails, naming them, instead of being recorded under a fingerprint that is not its code's (issue 56).
Across processes, each file's normalised hash is kept by its bytes' hash (`HashCache`: in the user's cache
folder), so that a command parses only the files that changed since one last did (a finished study run again
starts sooner); the bytes are always read, so a file changed on disk is always seen.
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
    """Code: each file's normalised hash, by name (`dape_core/model.py`, `plugin:my_conv`). The library's
    (`code_fingerprint`) carries `parts`, which of its files are the core and which each component's, so that
    `for_trial` gives a trial's own fingerprint: the core's files and its components' (issue 53)."""

    files: dict[str, str] = field(default_factory=dict)
    parts: "ComponentFiles | None" = field(default=None, compare=False, repr=False)

    def for_trial(self, config: dict) -> "CodeFingerprint":
        """The code a trial with this (resolved ExperimentConfig) `config` executes: the core's files, its
        components' files and the plugins that registered its components; the whole fingerprint where `parts`
        is not known."""
        if self.parts is None:
            return self
        return self.restricted(self.parts.trial_files(config, self.files))

    def restricted(self, names: frozenset[str]) -> "CodeFingerprint":
        return CodeFingerprint({name: value for name, value in self.files.items() if name in names}, self.parts)

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


def changed_within(old: CodeFingerprint, new: CodeFingerprint) -> list[str]:
    """The files of `new` (a trial's code) whose code differs in `old`, which may name more files (a fingerprint
    of the whole library, as recorded before issue 53): only the trial's files are compared."""
    return changed_files(old.restricted(frozenset(new.files)), new)


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
        self.known_imports: dict[str, list[str]] = {}  # "<bytes hash> <module>" -> the modules it imports
        self.used_imports: dict[str, list[str]] = {}
        try:
            stored = json.loads(path.read_text(encoding="utf-8")) if path is not None else {}
            if stored.get("normalisation") == NORMALISATION and isinstance(stored.get("hashes"), dict):
                self.known = {str(key): str(value) for key, value in stored["hashes"].items()}
                if isinstance(stored.get("imports"), dict):
                    self.known_imports = {str(key): [str(name) for name in value]
                                          for key, value in stored["imports"].items() if isinstance(value, list)}
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

    def imports(self, data: bytes, module: str, package: bool) -> set[str]:
        """The module names the file's import statements name (`_imported`), kept like its hash."""
        key = f"{hashlib.sha256(data).hexdigest()} {module}"
        value = self.known_imports.get(key)
        if value is None:
            text = data.decode("utf-8", errors="replace")
            try:
                value = sorted(_imported(ast.parse(text), module, package))
            except (SyntaxError, ValueError):
                value = []
            self.added = True
        self.used_imports[key] = value
        return set(value)

    def save(self) -> None:
        if not self.added or self.path is None:
            return
        kept = {**self.used, **{k: v for k, v in self.known.items() if k not in self.used}}
        imports = {**self.used_imports, **{k: v for k, v in self.known_imports.items() if k not in self.used_imports}}
        write_cache(self.path, json.dumps({"normalisation": NORMALISATION,
                                           "hashes": dict(list(kept.items())[:self.KEPT]),
                                           "imports": dict(list(imports.items())[:self.KEPT])}))


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


COMPONENT_PACKAGES = ("encodings", "processors", "contrib")  # the library's packages of components


def _module_name(name: str) -> str:
    """`dape_core/processors/dape.py` -> `dape_core.processors.dape` (a package: its folder's name)."""
    parts = name[:-3].split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(tree: ast.AST, module: str, package: bool) -> set[str]:
    """Every module name an import statement of the file may load, lazy ones (inside functions) included:
    `from .x import y` names `pkg.x` and `pkg.x.y` (the latter counts where it is a module)."""
    here = module if package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return found


@dataclass(frozen=True)
class ComponentFiles:
    """Which files of the library are the core (what every trial runs) and which each component's, from the
    import graph of the files (their syntax trees: no list kept by hand).

    A component's module is one its package's `__init__.py` imports to register its records (dape_core/encodings,
    dape_core/processors), or a module of dape_core/contrib. Its files: that module and every library module
    it imports, directly or not (lazily inside a function too), but for a registration (a component package's
    `__init__.py` importing its components: importing one component does not build the others). The core:
    every other file, and every file the core imports other than through a registration (a file the core
    imports is the core's, whichever component imports it too)."""

    core: frozenset[str]
    owned: dict[str, frozenset[str]]  # a component's module (`dape_core.encodings.kerple`) -> its own files

    @classmethod
    def from_imports(cls, imports: dict[str, set[str]]) -> "ComponentFiles":
        """`imports`: file name (`dape_core/model.py`) -> the module names its import statements name."""
        by_module = {_module_name(name): name for name in imports}
        edges = {name: {by_module[target] for target in targets if target in by_module}
                 for name, targets in imports.items()}
        root = next(iter(by_module), "").split(".")[0]
        packages = {f"{root}/{package}/__init__.py" for package in COMPONENT_PACKAGES}
        homes = {target for init in packages & set(edges) for target in edges[init]
                 if target.rpartition("/")[0] == init.rpartition("/")[0] and target not in packages}
        homes |= {name for name in edges if name.startswith(f"{root}/contrib/") and name not in packages}

        def closure(start: set[str], skip) -> set[str]:
            seen, todo = set(start), list(start)
            while todo:
                name = todo.pop()
                for target in edges.get(name, ()):
                    if target not in seen and not skip(name, target):
                        seen.add(target)
                        todo.append(target)
            return seen

        def registration(source: str, target: str) -> bool:  # a component package's __init__ registering one
            return source in packages and target in homes

        owned = {_module_name(home): closure({home}, registration) for home in homes}
        components = set().union(*owned.values()) if owned else set()
        core = closure(set(edges) - components, registration)
        return cls(frozenset(core), {home: frozenset(files - core) for home, files in owned.items()})

    def trial_files(self, config: dict, files: dict[str, str]) -> frozenset[str]:
        """The names of the files a trial of `config` runs: the core's, its components' and its plugins'."""
        names = set(self.core)
        for owner, module in trial_components(config):
            if owner != "built-in" and f"plugin:{owner}" in files:
                names.add(f"plugin:{owner}")
            names |= self.owned.get(owner if owner != "built-in" else module, frozenset())
        return frozenset(names)


def trial_components(config: dict) -> set[tuple[str, str]]:
    """(owner, module) of each component a trial of `config` builds: its encoding, its processor (none for
    `none`) and that processor's form. `owner`: "built-in", or the plugin or contrib module that registered it;
    `module`: the module that defines its builder."""
    from dape_core import components

    model = config.get("model") or {}
    records = [components.find(components.encodings, model.get("pos_encoding"))]
    processor = components.find(components.processors, model.get("processor"))
    if processor is not None and processor.present:
        records.append(processor)
        encoding = records[0]
        from dape_core.processors.forms import processor_form

        has_bias = encoding is not None and encoding.has_bias
        records.append(components.find(components.forms, processor_form(model.get("form", ""), has_bias)))
    found = set()
    for record in records:
        if record is None:
            continue
        builder = getattr(record, "build", None) or getattr(record, "parts", None)
        found.add((record.owner, getattr(builder, "__module__", "") or ""))
    return found


@lru_cache(maxsize=4)
def _library_files(root: Path) -> tuple[tuple[tuple[str, str], ...], ComponentFiles]:
    cache = HashCache(HashCache.default_path())
    files, imports = [], {}
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        name = f"{root.name}/{path.relative_to(root).as_posix()}"
        data = path.read_bytes()
        files.append((name, cache.hash(data, name)))
        imports[name] = cache.imports(data, _module_name(name), path.name == "__init__.py")
    cache.save()
    return tuple(files), ComponentFiles.from_imports(imports)


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
    library, parts = _library_files(root or library_root())
    files = dict(library)
    for payload in plugins or ():
        files[f"plugin:{payload['module']}"] = _plugin_hash(_plugin_source(payload))
    return CodeFingerprint(files, parts)


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


def changed_while_running(expected: dict[str, str], config: dict) -> list[str]:
    """In a trial's process: the files of the trial of (resolved ExperimentConfig) `config` whose code on disk
    now differs from `expected` (the driver's fingerprint's `files`, the one the trial's run is tagged with).
    The library is that of this process (the files it imports, read again, not the process's cache); the
    plugins are not read (the process runs the source the driver shipped)."""
    library, parts = _library_files.__wrapped__(library_root())
    return changed_within(CodeFingerprint(dict(expected)), CodeFingerprint(dict(library), parts).for_trial(config))

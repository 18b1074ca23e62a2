"""A study's plugins: modules of the user's that register components through dape_core/components.py.

A study names them under `plugins:` (docs/extending.md):
- `my_conv.py`, a file, relative to the study file's folder: it travels with the study. Its source is read
  once, on the driver, and goes with every trial (and every evaluation task) to whatever process runs it,
  which executes that same source as the module `my_conv`: a Ray worker on another machine, or a SLURM
  job's, needs no copy of the file.
- `my_lab.my_conv`, a module: imported by name, so it must be importable where trials run (installed, or on
  PYTHONPATH) and be the same code there: a worker checks the hash of its source against the driver's, and
  `orchestrator run` asks one Ray worker to load every plugin before the first trial launches.

Either way a plugin is loaded before the study is validated, so that its names, options and costs are
checked, planned and reported like a built-in's; what it registers is checked against the component
contract (contract.py); and the SHA-256 of its source tags every trial run (`plugin_tags`), so that a
stored result names the code that produced it.

Faults, each a PluginError naming the plugin and the problem: a module that does not import (or whose
import raises), a component whose name is taken or whose record misses a required part (a
ComponentError of the registry), a plugin that registers nothing, and, on a worker, a module whose source
differs from the driver's. This module loads without torch (a plugin's own imports may load it).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import types
from dataclasses import dataclass
from pathlib import Path

from . import components
from .components import ComponentError

__all__ = ["Plugin", "PluginError", "TAG_PREFIX", "load", "load_all", "load_shipped", "plugin_tags"]
TAG_PREFIX = "plugin."  # the trial runs' tag: plugin.<module> = sha256 of its source


class PluginError(ValueError):
    """A plugin that cannot be used, with its name and the problem."""


@dataclass(frozen=True)
class Plugin:
    """A loaded plugin: how the study names it, its module, its source and what it registered."""

    spec: str
    module: str
    kind: str  # "file" (travels with the study) or "module" (imported by name where trials run)
    path: str
    sha256: str
    source: str
    components: tuple[tuple[str, str], ...]  # (kind, name) of each registered component

    def payload(self) -> dict:
        """What travels to a trial's process: plain, picklable data (a module's source stays behind)."""
        return {"spec": self.spec, "module": self.module, "kind": self.kind, "path": self.path,
                "sha256": self.sha256, "source": self.source if self.kind == "file" else ""}

    def describe(self) -> str:
        return ", ".join(f"{kind} {name!r}" for kind, name in self.components)


_LOADED: dict[str, Plugin] = {}  # by module name, in this process


def _hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def load(spec: str, base: Path | str = ".") -> Plugin:
    """Load the plugin `spec` names (a `.py` file relative to `base`, or a module name); a plugin already
    loaded from the same source is not loaded again. PluginError for every fault (module docstring)."""
    if not isinstance(spec, str) or not spec.strip():
        raise PluginError(f"{spec!r}: a plugin is a module name (my_lab.my_conv) or a .py file beside the study")
    if spec.endswith(".py"):
        path = (Path(base) / spec).resolve()
        if not path.is_file():
            raise PluginError(f"{spec!r}: no such file ({path})")
        module, kind = path.stem, "file"
        if not module.isidentifier():
            raise PluginError(f"{spec!r}: the file's name must be a Python identifier (it becomes the module's)")
        source = path.read_text(encoding="utf-8")
    else:
        module, kind = spec, "module"
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError) as error:
            found, problem = None, f"{type(error).__name__}: {error}"
        else:
            problem = "no module of that name is importable here (install it, put it on PYTHONPATH, or name a .py file)"
        if found is None or not found.origin or not found.has_location:
            raise PluginError(f"{spec!r} does not import: {problem}")
        path = Path(found.origin)
        source = path.read_text(encoding="utf-8")
    digest = _hash(source)
    loaded = _LOADED.get(module)
    if loaded is not None and loaded.sha256 == digest and loaded.path == str(path):
        return loaded
    plugin = _execute(spec, module, kind, str(path), source, digest)
    _LOADED[module] = plugin
    return plugin


def _execute(spec: str, module: str, kind: str, path: str, source: str, digest: str) -> Plugin:
    """Import the plugin with its registrations attributed to it; undo them on any fault."""
    components.forget(module)
    if module in sys.modules and kind == "file" and module not in _LOADED:
        raise PluginError(f"{spec!r}: a module named {module!r} is imported already ({sys.modules[module]!r}); "
                          "rename the file")
    sys.modules.pop(module, None)
    try:
        with components.registering_for(module):
            _run(module, kind, path, source)
    except ComponentError as error:
        _undo(module)
        raise PluginError(f"{spec!r} is refused: {error}") from None
    except BaseException as error:
        _undo(module)
        if isinstance(error, KeyboardInterrupt):
            raise
        raise PluginError(f"{spec!r} does not import: {type(error).__name__}: {error}") from None
    registered = tuple((kind_, record.name) for kind_, record in components.registered_by(module))
    if not registered:
        _undo(module)
        raise PluginError(f"{spec!r} registers no component: call dape_core.components.register_encoding, "
                          "register_processor or register_form at import")
    return Plugin(spec, module, kind, path, digest, source, registered)


def _run(module: str, kind: str, path: str, source: str) -> None:
    """Execute the plugin's source as the module `module` (a file) or import it by name (a module)."""
    if kind == "file":
        namespace = types.ModuleType(module)
        namespace.__file__ = path
        sys.modules[module] = namespace  # before running it: dataclasses and pickling look it up
        exec(compile(source, path, "exec"), namespace.__dict__)  # noqa: S102 - the user's own plugin
    else:
        importlib.import_module(module)


def _undo(module: str) -> None:
    components.forget(module)
    sys.modules.pop(module, None)
    _LOADED.pop(module, None)


def load_all(specs: list[str], base: Path | str = ".") -> tuple[list[Plugin], list[str]]:
    """(the plugins loaded, one problem per plugin that could not be: `plugins[i]: ...`)."""
    plugins, problems = [], []
    for index, spec in enumerate(specs):
        try:
            plugins.append(load(spec, base))
        except PluginError as error:
            problems.append(f"plugins[{index}]: {error}")
    return plugins, problems


def load_shipped(payloads: list[dict] | tuple = ()) -> None:
    """In a trial's (or an evaluation task's) process: load the plugins the driver loaded, from the source it
    sent (a file plugin) or by name (a module plugin, whose source must hash to the driver's)."""
    for shipped in payloads or ():
        module = shipped["module"]
        loaded = _LOADED.get(module)
        if loaded is not None and loaded.sha256 == shipped["sha256"]:
            continue
        if shipped["kind"] == "file":
            plugin = _execute(shipped["spec"], module, "file", shipped["path"], shipped["source"], shipped["sha256"])
        else:
            plugin = load(module)
            if plugin.sha256 != shipped["sha256"]:
                raise PluginError(f"{shipped['spec']!r}: the module imported here ({plugin.path}) is not the driver's "
                                  f"(source sha256 {plugin.sha256[:12]} here, {shipped['sha256'][:12]} there)")
        _LOADED[module] = plugin


def plugin_tags(payloads: list[dict] | tuple) -> dict[str, str]:
    """The tags that name each plugin's code on a trial run: plugin.<module> = sha256 of its source."""
    return {f"{TAG_PREFIX}{shipped['module']}": shipped["sha256"] for shipped in payloads or ()}

"""The public API for adding a position encoding, a score processor or a processor form, as a built-in (a
module under `dape_core/contrib/`) or as a study's plugin (a module the study names under `plugins:`);
docs/extending.md is the guide. The records and the registry they go into are `dape_core/registry.py`'s; this
module is the registry with the built-ins in it: importing it loads dape_core's own records (a torch-free file
per component in `dape_core/encodings/` and `dape_core/processors/`, its torch module beside it), and
`discover_contrib()` imports the modules of `dape_core/contrib/`, each registering its components as their owner.

A record carries: its settings (the `model:` fields it reads, and the new settings it declares, which a study
gives under `model.options`), its builder (the torch module), its label in reports, its cost per score-map
entry (so that `orchestrator plan` estimates it), whether the fused Triton kernels take it, and the causality
it promises (causal; a processor may leak only when `model.leak` is on and it declares the `leak` setting),
which the component contract, `dape_core/contract.py`, checks before a study's first trial.

It loads without torch: validating a study reads it.
"""

from __future__ import annotations

import importlib
import pkgutil

from . import contrib
from . import encodings as _encodings
from . import processors as _processors
from .registry import (
    ComponentError,
    Cost,
    Encoding,
    Form,
    Processor,
    Registry,
    Setting,
    component_fields,
    encodings,
    forget,
    forms,
    processors,
    register_encoding,
    register_form,
    register_processor,
    registered_by,
    registering_for,
    setting_labels,
    value_labels,
)

__all__ = [
    "ComponentError", "Cost", "Encoding", "Form", "Processor", "Registry", "Setting", "component_fields",
    "discover_contrib", "encodings", "forget", "forms", "processors", "register_encoding", "register_form",
    "register_processor", "registered_by", "registering_for", "setting_labels", "value_labels",
]
BUILTIN_TABLES = (_encodings, _processors)  # imported above: they registered dape_core's own records
_discovered: list[str] = []  # the contrib modules imported (discover_contrib)


def discover_contrib() -> None:
    """Import every module of `dape_core/contrib/` once (they may import torch): each registers its
    components, as their owner. Called where a name is not found among the registered ones, or all are listed."""
    if _discovered:
        return
    for module in pkgutil.iter_modules(contrib.__path__):
        name = f"{contrib.__name__}.{module.name}"
        _discovered.append(name)
        with registering_for(name):
            importlib.import_module(name)  # a folder's modules, found on disk: no dependency of this module's


def find(registry: Registry, name: object):
    """The record named `name` in `registry`, contrib's discovered first where it is not registered; or None."""
    record = registry.get(name)
    if record is None and isinstance(name, str):
        discover_contrib()
        record = registry.get(name)
    return record


def names(registry: Registry) -> tuple[str, ...]:
    """Every registered name of `registry`, contrib's included."""
    discover_contrib()
    return registry.names()

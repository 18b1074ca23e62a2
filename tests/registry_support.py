"""The component registry put back as it was after a test that loads plugins (tests/test_plugins.py,
tests/test_contract.py): its records, the loaded plugins, and the modules the test's plugins imported."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dape_core import components, plugins

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@contextmanager
def restored_registry(tmp_path_factory) -> Iterator[None]:
    """Within the block, plugins may register; afterwards the registries, the loaded plugins and sys.modules
    are as they were (a plugin module under the test's temporary folders or examples/ is forgotten)."""
    temporary = str(tmp_path_factory.getbasetemp())
    components.discover_contrib()  # the built-ins and contrib's registered before the snapshot
    components.processors.names()
    registries = [(registry, dict(registry.records)) for registry in
                  (components.encodings, components.processors, components.forms)]
    loaded, modules = dict(plugins._LOADED), set(sys.modules)
    try:
        yield
    finally:
        for registry, records in registries:
            registry.records.clear()
            registry.records.update(records)
        plugins._LOADED.clear()
        plugins._LOADED.update(loaded)
        for name in set(sys.modules) - modules:  # the plugins' modules (and their helpers) of this test
            if str(getattr(sys.modules[name], "__file__", None) or "").startswith((temporary, str(EXAMPLES))):
                sys.modules.pop(name, None)

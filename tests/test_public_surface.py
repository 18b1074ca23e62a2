"""dape_core's public surface: every name the docs import (`from dape_core... import ...` in docs/, README.md and
examples/) imports and is declared in its module's `__all__`; every name of an `__all__` imports; a name that
moved still imports from its documented old home, with a DeprecationWarning, for one release; and no module
of dape_core/, orchestrator/ or docsgen/ imports another module's private name (`from x import _name`) or a
private module of a package it is not in (`dape_core._x` from orchestrator/)."""

from __future__ import annotations

import ast
import importlib
import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "examples").glob("*.py"))]
IMPORT = re.compile(r"^\s*from (dape_core(?:\.\w+)*) import (\([^)]*\)|[^\n]*)", re.MULTILINE)
DOTTED = re.compile(r"`(dape_core(?:\.\w+)+)`")
DECLARED = ["dape_core", "dape_core.components", "dape_core.plugins", "dape_core.registry", "dape_core.encodings",
            "dape_core.processors", "dape_core.data", "dape_core.evaluate", "dape_core.train", "dape_core.che"]
FIRST_PARTY = ("dape_core", "orchestrator", "docsgen")


def documented_imports() -> list[tuple[str, str, str]]:
    """(document, module, name) of every `from dape_core... import name` line the docs show."""
    found = []
    for document in DOCUMENTS:
        for module, names in IMPORT.findall(document.read_text()):
            names = re.sub(r"#[^\n]*", "", names).strip("()")
            for name in filter(None, (part.split(" as ")[0].strip() for part in names.split(","))):
                found.append((str(document.relative_to(ROOT)), module, name))
    return found


def test_the_docs_import_names_at_all():
    # the pattern reads what the docs show (a regression of it would pass every test below with nothing checked)
    found = {(module, name) for _, module, name in documented_imports()}
    assert {("dape_core", "ModelConfig"), ("dape_core.processors", "ScoreProcessor"),
            ("dape_core.encodings", "PositionEncoding"), ("dape_core.components", "register_processor")} <= found


@pytest.mark.parametrize(("document", "module", "name"), documented_imports())
def test_every_documented_import_works_and_is_declared(document, module, name):
    imported = importlib.import_module(module)
    assert getattr(imported, name, None) is not None, f"{document}: from {module} import {name} fails"
    assert name in getattr(imported, "__all__", ()), f"{document}: {module}.{name} is not in {module}.__all__"


@pytest.mark.parametrize("reference", sorted({ref for doc in DOCUMENTS for ref in DOTTED.findall(doc.read_text())}))
def test_every_documented_dotted_name_resolves(reference):
    parts = reference.split(".")
    for cut in range(len(parts), 0, -1):  # the longest importable module, then attributes
        try:
            value = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            value = getattr(value, attribute)
        return
    pytest.fail(f"{reference} does not import")


@pytest.mark.parametrize("module", DECLARED)
def test_every_declared_name_imports(module):
    imported = importlib.import_module(module)
    assert len(imported.__all__) == len(set(imported.__all__)), "a name listed twice"
    for name in imported.__all__:
        assert getattr(imported, name) is not None, (module, name)


def test_a_moved_name_still_imports_with_a_deprecation_warning():
    from dape_core.encodings import PositionEncoding

    with pytest.warns(DeprecationWarning, match="import it from dape_core.encodings"):
        from dape_core.position import PositionEncoding as FromItsOldHome
    assert FromItsOldHome is PositionEncoding
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        import dape_core.position  # the module itself imports quietly: only the old name warns
    with pytest.raises(AttributeError, match="no attribute 'RoPE'"):
        dape_core.position.RoPE  # noqa: B018


def _is_module(root: Path, dotted: str) -> bool:
    path = root / dotted.replace(".", "/")
    return (path / "__init__.py").is_file() or path.with_suffix(".py").is_file()


def private_imports(root: Path = ROOT, tops: tuple[str, ...] = FIRST_PARTY) -> list[str]:
    """`path:line: name` of each import of a first-party private name across modules: `from x import _name` (a
    private function, class or constant: its own module's), and `x._module` from outside x's package."""
    found = []
    for top in tops:
        for path in sorted((root / top).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            package = ".".join(parts[:-1])  # a package's __init__ belongs to the package itself
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom):
                    base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                    source = ".".join(base + ([node.module] if node.module else []))
                    targets = [f"{source}.{alias.name}" for alias in node.names]
                elif isinstance(node, ast.Import):
                    targets = [alias.name for alias in node.names]
                else:
                    continue
                for target in targets:
                    names = target.split(".")
                    if names[0] not in FIRST_PARTY:
                        continue
                    for i, part in enumerate(names[1:], start=1):
                        if part.startswith("_") and not part.startswith("__"):
                            holder = ".".join(names[:i])
                            if not _is_module(root, f"{holder}.{part}") or not (
                                    package == holder or package.startswith(f"{holder}.")):
                                found.append(f"{path.relative_to(root)}:{node.lineno}: {target}")
                            break
    return found


def test_no_private_name_is_imported_across_modules():
    assert private_imports() == []


def test_the_private_import_check_sees_them(tmp_path):
    for name, text in {"dape_core/__init__.py": "", "dape_core/_hidden.py": "", "dape_core/a.py": "_X = 1\n",
                       "dape_core/sub/__init__.py": "from .._hidden import y\n",
                       "dape_core/b.py": "from .a import _X\nfrom . import _hidden\n",
                       "orchestrator/__init__.py": "", "orchestrator/c.py": "import dape_core._hidden\n"}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert private_imports(tmp_path, ("dape_core", "orchestrator")) == [
        "dape_core/b.py:1: dape_core.a._X", "orchestrator/c.py:1: dape_core._hidden"]

"""dape_core has no import circle (issue 42): the modules' import statements, read with `ast` (those inside
functions too; only `if TYPE_CHECKING:` blocks, which never run, are left out), make a graph without a cycle,
and no module imports another of dape_core by a string (importlib) to hide an edge. Nor do the imports a reader
sees: with the `if TYPE_CHECKING:` imports of the modules counted too (a package's `__init__` aside, whose
type-only imports name what it re-exports lazily), the graph has no cycle either."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "dape_core"
# Modules that import by name what they find on disk, not a dependency of theirs: a folder's plugins.
DISCOVERY = {"dape_core.components", "dape_core.plugins", "dape_core.lazy"}


def _name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(path): path for path in PACKAGE.rglob("*.py")}


def _runtime_nodes(tree: ast.AST, type_only: bool = False):
    """Every node but those under `if TYPE_CHECKING:` (with `type_only`, those too)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if not type_only and isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def _resolve(module: str, path: Path, node: ast.ImportFrom) -> list[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    if node.level:
        base = package.split(".")
        base = base[: len(base) - node.level + 1]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    found = [f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in MODULES]
    return found + ([target] if target in MODULES else [])


def imports(module: str, type_only: bool = False) -> set[str]:
    """The modules of dape_core that importing `module` runs; with `type_only`, also those its type-only imports
    name (except in a package's `__init__`)."""
    path = MODULES[module]
    edges: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text()), type_only and path.name != "__init__.py"):
        if isinstance(node, ast.Import):
            edges |= {alias.name for alias in node.names if alias.name in MODULES}
        elif isinstance(node, ast.ImportFrom):
            edges |= set(_resolve(module, path, node))
    edges.discard(module)
    # importing a.b.c runs a and a.b first
    return edges | {parent for edge in edges for parent in _parents(edge)} - {module} - set(_parents(module))


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in MODULES]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles a depth-first walk meets (one per back edge)."""
    found, state = [], {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(trail[trail.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_the_walk_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_dape_core_has_no_import_cycle():
    graph = {module: imports(module) for module in MODULES}
    assert graph["dape_core.config"] >= {"dape_core.registry", "dape_core.encodings"}  # the walk sees edges
    assert cycles(graph) == []


def test_type_only_imports_close_no_circle_either():
    graph = {module: imports(module, type_only=True) for module in MODULES}
    # the walk sees a type-only edge (applicability.py names the experiment result for its types only)
    assert "dape_core.experiment" in graph["dape_core.applicability"] - imports("dape_core.applicability")
    assert cycles(graph) == []


def test_no_module_imports_dape_core_by_a_string():
    found = []
    for module, path in MODULES.items():
        if module in DISCOVERY:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in ("importlib.import_module", "__import__"):
                found.append((module, node.lineno, ast.unparse(node)))
    assert found == []

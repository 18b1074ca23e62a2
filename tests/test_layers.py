"""The import graph of dape_core/ and orchestrator/, read from the source with `ast` (top-level and function-level
imports alike; `if TYPE_CHECKING:` blocks, which never run, left out): no import cycle, and no orchestrator module
importing a package above its floor. The floors, bottom to top, are the data below (README.md "The package
table"); a module may import its own floor and the floors below it, never one above.

An edge is what Python runs: `from .x import name` and `import a.b` reach module x (a.b) and every package on the
way to it that is not a package of the importing module itself (those are initialised before any of their
submodules runs), so `from . import cells` inside reporting/ is an edge to reporting/cells.py alone, while
`from ..tracking.store import StudyStore` also runs tracking/__init__.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# orchestrator/'s floors, bottom to top: each module imports only its own floor or lower.
FLOORS = {
    "orchestrator.errors": 0, "orchestrator.folders": 0, "orchestrator.library_logs": 0,
    "orchestrator.study": 1,  # the format, its validation, a trial's identity
    "orchestrator.trial": 2,  # the shared value types: what a trial is, what a trial reports
    "orchestrator.tracking": 3,
    "orchestrator.judging": 4,  # the decision rule: claims judged from a results frame, the --decide design
    "orchestrator.planning": 5,
    "orchestrator.run_context": 5,  # what one command runs with, carried through run, decide, evaluate, report
    "orchestrator.execution": 6, "orchestrator.reporting": 6,
    "orchestrator.evaluation": 7, "orchestrator.slurm": 7, "orchestrator.doctor": 7,
    "orchestrator.run": 8,  # `orchestrator run`: execution, then the report
    "orchestrator.decide_loop": 8,  # `orchestrator run --decide`: looks of execution, judged by judging/
    "orchestrator.commands": 8,  # each command's work over one invocation (the study located, loaded, its store)
    "orchestrator.cli": 8, "orchestrator.data_cli": 8, "orchestrator.__main__": 8, "orchestrator": 8,
}
# Packages of one floor that must not import each other: `run` (cli.py) calls execution, then the report.
APART = {("orchestrator.execution", "orchestrator.reporting"), ("orchestrator.reporting", "orchestrator.execution")}


def modules(root: Path, packages: tuple[str, ...]) -> dict[str, tuple[Path, bool]]:
    """{dotted name: (file, is a package's __init__)} for every module of `packages` under `root`."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


def _type_checking_only(tree: ast.Module) -> set[int]:
    """The ids of the import nodes inside `if TYPE_CHECKING:` blocks."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(inner) for statement in node.body for inner in ast.walk(statement)}
    return skipped


def import_graph(root: Path, packages: tuple[str, ...]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(edges {module: modules it imports}, names {module: `from <its own package> import <non-module name>`})."""
    known = modules(root, packages)

    def owner(name: str) -> str | None:  # the longest known module that `name` starts with
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {name: set() for name in known}
    own_package_names: dict[str, set[str]] = {name: set() for name in known}
    for name, (path, is_package) in known.items():
        package = name if is_package else name.rpartition(".")[0]
        ancestors = ({".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
                     | ({name} if is_package else set()))
        tree = ast.parse(path.read_text(), str(path))
        skipped = _type_checking_only(tree)
        for node in ast.walk(tree):
            if id(node) in skipped or not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    stem = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(stem + ([node.module] if node.module else []))
                targets = []
                for alias in node.names:
                    if f"{base}.{alias.name}" in known:
                        targets.append(f"{base}.{alias.name}")
                    else:
                        targets.append(base)
                        if base in ancestors:
                            own_package_names[name].add(f"from {base} import {alias.name}")
            for target in targets:
                reached = owner(target)
                if reached is None:
                    continue  # outside the packages read (the standard library, torch, ...)
                parts = reached.split(".")
                for i in range(1, len(parts) + 1):  # the module and the packages on the way to it
                    step = ".".join(parts[:i])
                    if step in known and step not in ancestors and step != name:
                        edges[name].add(step)
    return edges, own_package_names


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each as one closed path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(start: str) -> None:  # iterative: no recursion limit on a long chain
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(edges[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(_closed_path(sorted(component), edges))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def _closed_path(component: list[str], edges: dict[str, set[str]]) -> list[str]:
    """One cycle through the component's first module, for the message (breadth-first back to it)."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for successor in sorted(edges[node] & members):
            if successor == start:
                return paths[node] + [start]
            if successor not in paths:
                paths[successor] = paths[node] + [successor]
                queue.append(successor)
    return component


def _describe(found: list[list[str]]) -> str:
    return "\n".join(" -> ".join(path) for path in found)


def floor_of(module: str) -> int | None:
    """The module's own floor, else its package's (orchestrator.X): None where neither is listed. The root
    `orchestrator` is its __init__'s floor alone, never a default, so that a new package without a floor fails."""
    for name in (module, _package(module)):
        if name in FLOORS:
            return FLOORS[name]
    return None


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def upward_imports(edges: dict[str, set[str]]) -> list[str]:
    problems = []
    for module, targets in sorted(edges.items()):
        if not module.startswith("orchestrator"):
            continue
        for target in sorted(targets):
            if not target.startswith("orchestrator"):
                continue
            mine, theirs = floor_of(module), floor_of(target)
            if theirs > mine:
                problems.append(f"{module} (floor {mine}) imports {target} (floor {theirs})")
            elif (_package(module), _package(target)) in APART:
                problems.append(f"{module} imports {target}: {_package(module)} and {_package(target)} stay apart")
    return problems


@pytest.fixture(scope="module")
def graph():
    return import_graph(ROOT, ("dape_core", "orchestrator"))


def test_orchestrator_has_no_import_cycle(graph):
    edges, _ = graph
    found = [path for path in cycles(edges) if path[0].startswith("orchestrator")]
    assert not found, "import cycles:\n" + _describe(found)


def test_dape_core_has_no_import_cycle(graph):
    edges, _ = graph
    found = [path for path in cycles(edges) if path[0].startswith("dape_core")]
    assert not found, "import cycles:\n" + _describe(found)


def test_every_orchestrator_module_has_a_floor(graph):
    edges, _ = graph
    assert [module for module in edges if module.startswith("orchestrator") and floor_of(module) is None] == []


def test_a_package_without_a_floor_has_none():
    # The check above can fail: a module of an unlisted package, or an unlisted top-level module, has no floor.
    assert floor_of("orchestrator.study.model") == FLOORS["orchestrator.study"]
    assert floor_of("orchestrator") == FLOORS["orchestrator"]
    assert floor_of("orchestrator.unlisted.module") is None
    assert floor_of("orchestrator.unlisted") is None


def test_no_orchestrator_module_imports_a_floor_above_its_own(graph):
    edges, _ = graph
    problems = upward_imports(edges)
    assert not problems, "\n".join(problems)


def test_the_decision_rule_sits_below_what_reads_it(graph):
    # judging/ is read by the report, the plan, the commands and the --decide loop; it reads none of them.
    readers = ("orchestrator.reporting", "orchestrator.planning", "orchestrator.commands", "orchestrator.decide_loop")
    assert all(FLOORS["orchestrator.judging"] < FLOORS[reader] for reader in readers)
    edges, _ = graph
    assert [f"{module} -> {target}" for module, targets in sorted(edges.items())
            if module.startswith("orchestrator.judging") for target in sorted(targets)
            if target.startswith(readers)] == []


def test_dape_core_imports_nothing_of_the_orchestrator(graph):
    edges, _ = graph
    assert [f"{module} -> {target}" for module, targets in sorted(edges.items()) if module.startswith("dape_core")
            for target in sorted(targets) if target.startswith("orchestrator")] == []


def test_no_orchestrator_submodule_imports_names_of_its_own_package(graph):
    # A submodule reads a name from the module that defines it, never from its package's __init__ (which may be
    # importing that very submodule at the time).
    _, names = graph
    found = {module: sorted(found) for module, found in names.items() if found and module.startswith("orchestrator")}
    assert found == {}


def test_the_graph_sees_cycles_floors_and_package_names(tmp_path):
    # The checks above pass only if the graph finds what they look for: a small tree with each fault in it.
    (tmp_path / "orchestrator" / "study").mkdir(parents=True)
    (tmp_path / "orchestrator" / "tracking").mkdir()
    files = {
        "__init__.py": "",
        "errors.py": "",
        "study/__init__.py": "from .model import Study\n",
        "study/model.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .rows import Row\n"
                          "from . import problems\nStudy = 1\n",
        "study/problems.py": "",
        "study/rows.py": "from ..tracking import uri\ndef late():\n    from orchestrator.study.model import Study\n",
        "study/locate.py": "from . import Study\n",
        "tracking/__init__.py": "",
        "tracking/store.py": "from ..study import rows\n",
        "tracking/uri.py": "import orchestrator.tracking.store\n",
    }
    for name, text in files.items():
        (tmp_path / "orchestrator" / name).write_text(text)
    edges, names = import_graph(tmp_path, ("orchestrator",))
    assert edges["orchestrator.study.model"] == {"orchestrator.study.problems"}  # TYPE_CHECKING left out
    assert edges["orchestrator.tracking.store"] == {"orchestrator.study", "orchestrator.study.rows"}
    assert cycles(edges) == [
        ["orchestrator.study.rows", "orchestrator.tracking.uri", "orchestrator.tracking.store",
         "orchestrator.study.rows"]]
    assert upward_imports(edges) == ["orchestrator.study.rows (floor 1) imports orchestrator.tracking (floor 3)",
                                     "orchestrator.study.rows (floor 1) imports orchestrator.tracking.uri (floor 3)"]
    assert names["orchestrator.study.locate"] == {"from orchestrator.study import Study"}

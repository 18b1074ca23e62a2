"""The metric-names reference page, from `dape_core/metric_names.py` itself: each name (or per-length prefix)
the module defines, with the comment that says what it is. The module is read as source (its comments are its
documentation), and the values come from the imported module, so the page shows what the code logs."""

from __future__ import annotations

import ast
import inspect


def entries() -> list[tuple[list[str], str]]:
    """(constant names, comment) per top-level assignment of string values, in the module's order; a comment
    block above an assignment (or at its line's end) describes it, a block above several describes them all."""
    from dape_core import metric_names

    source = inspect.getsource(metric_names)
    lines = source.splitlines()
    tree = ast.parse(source)
    found: list[tuple[list[str], str]] = []
    previous_end, previous_comment = -1, ""
    for node in tree.body:
        if not isinstance(node, ast.Assign):
            continue
        names = [target.id for target in node.targets if isinstance(target, ast.Name)]
        names += [element.id for target in node.targets if isinstance(target, ast.Tuple)
                  for element in target.elts if isinstance(element, ast.Name)]
        names = [name for name in names if not name.startswith("_")]
        if not names:
            continue
        comment: list[str] = []
        row = node.lineno - 2
        while row >= 0 and lines[row].lstrip().startswith("#"):
            comment.insert(0, lines[row].strip().lstrip("#").strip())
            row -= 1
        end = node.end_lineno or node.lineno  # ast.parse always sets end_lineno
        tail = lines[end - 1]
        if "#" in tail and not tail.lstrip().startswith("#"):
            comment.append(tail.split("#", 1)[1].strip())
        text = " ".join(comment)
        if not comment and node.lineno == previous_end + 1:
            text = previous_comment  # a line of the block the comment above it describes
        found.append((names, text))
        previous_end, previous_comment = end, text
    return found


def _value(name: str) -> str:
    from dape_core import metric_names

    value = getattr(metric_names, name)
    if isinstance(value, str):
        return f"`{value}`"
    if isinstance(value, dict):
        return ", ".join(f"`{key}` ← `{item}`" for key, item in value.items())
    if isinstance(value, (tuple, list)):
        return ", ".join(f"`{item}`" for item in value)
    return f"`{value!r}`"


def render() -> str:
    lines = ["# Metric names", "",
             "Generated from `dape_core/metric_names.py` at each build of this site: the only place metric names are "
             "spelled (a test fails on a string constant spelling one elsewhere). A per-length metric is its prefix "
             "and the length: `ppl_512` is the perplexity at 512 tokens. What the values mean and how they are "
             "measured: [the method](../method.md), §6.", "",
             "| constant | name(s) logged | what it is |", "|---|---|---|"]
    for names, comment in entries():
        for name in names:
            text = " ".join(comment.split()).replace("|", "\\|").replace("<", "&lt;")
            lines.append(f"| `{name}` | {_value(name)} | {text} |")
    lines += ["", "The module's functions build and parse the names: "
              + ", ".join(f"`{name}`" for name in _functions()) + "."]
    return "\n".join(lines) + "\n"


def _functions() -> list[str]:
    from dape_core import metric_names

    return [name for name, value in vars(metric_names).items()
            if inspect.isfunction(value) and value.__module__ == metric_names.__name__ and not name.startswith("_")]

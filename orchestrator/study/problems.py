"""How a study's problems are reported: `StudyError` lists every problem at once, each naming its field
path ("base.model.kernel_size: ..."), with the valid keys where a key is unknown and a "did you mean" where a
key or a value is close to a known one."""

from __future__ import annotations

import dataclasses
import difflib
import re
import typing

from pydantic import BaseModel, ValidationError


class StudyError(ValueError):
    """A study file that cannot run. `problems` lists one message per field, each naming its path."""

    def __init__(self, source: str, problems: list[str]):
        self.source, self.problems = source, problems
        lines = "\n".join(f"  - {problem}" for problem in problems)
        super().__init__(f"{source}: {len(problems)} problem(s) in the study file:\n{lines}")


def _fields_at(root: type, loc: tuple) -> list[str]:
    """Field names of the (data)class reached by following `loc` from `root`, for "valid keys" hints."""
    node: typing.Any = root  # a class, or whatever annotation the next field has
    for part in loc:
        hints = typing.get_type_hints(node) if isinstance(node, type) else {}
        node = hints.get(part)
        if node is None:
            return []
    if isinstance(node, type) and issubclass(node, BaseModel):
        return list(node.model_fields)
    if dataclasses.is_dataclass(node):
        return [f.name for f in dataclasses.fields(node)]
    return []


def did_you_mean(word: object, known: list[str]) -> str:
    """" (did you mean 'seeds'?)" where `word` is close to one of `known` (difflib's ratio, 0.6), else ""."""
    close = difflib.get_close_matches(word, known, n=1, cutoff=0.6) if isinstance(word, str) else []
    return f" (did you mean {close[0]!r}?)" if close else ""


def format_pydantic(error: ValidationError, prefix: str, root: type) -> list[str]:
    """One message per pydantic error, named by its path under `prefix` (a study section or a row's name)."""
    problems = []
    for item in error.errors():
        loc = tuple(item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
            valid = _fields_at(root, loc[:-1])
            message = (f"unknown key {loc[-1]!r}{did_you_mean(str(loc[-1]), valid)}"
                       + (f"; valid keys: {', '.join(valid)}" if valid else ""))
        elif item["type"] == "literal_error":  # "Input should be 'none', 'dape' or 'dapev2'"
            expected = str(item.get("ctx", {}).get("expected", ""))
            message += did_you_mean(item.get("input"), re.findall(r"'([^']*)'", expected))
        path = ".".join(str(part) for part in loc)
        if prefix in ("base", "study"):
            problems.append(f"{prefix}.{path}: {message}" if path else f"{prefix}: {message}")
        else:
            problems.append(f"{prefix}: {path}: {message}" if path else f"{prefix}: {message}")
    return problems

"""How a study's problems are reported: `StudyError` lists every problem at once, each naming its field
path ("base.model.kernel_size: ..."), with the valid keys where a key is unknown and a "did you mean" where a
key or a value is close to a known one."""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
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


def _unwrap(node: typing.Any) -> typing.Any:
    while typing.get_origin(node) is typing.Annotated:
        node = typing.get_args(node)[0]
    return node


def _member(union: typing.Any, tag: str) -> typing.Any:
    """The member of a union that pydantic's tag names (a `Tag("k")`, or a model whose `kind` is that literal)."""
    for arg in typing.get_args(union):
        if typing.get_origin(arg) is typing.Annotated and any(getattr(meta, "tag", None) == tag
                                                              for meta in typing.get_args(arg)[1:]):
            return _unwrap(arg)
        inner = _unwrap(arg)
        if isinstance(inner, type) and issubclass(inner, BaseModel) and "kind" in inner.model_fields:
            if tag in typing.get_args(inner.model_fields["kind"].annotation):
                return inner
    return None


def user_loc(root: type, loc: tuple) -> tuple:
    """`loc` as the study file spells it: without the tags pydantic inserts for a union's member (the `k` of
    `kernel_size.k`, the `compare` of `expect.0.compare.direction`), which name no field the user wrote."""
    node: typing.Any = root
    out: list = []
    for part in loc:
        node = _unwrap(node) if node is not None else None
        if typing.get_origin(node) in (typing.Union, types.UnionType):
            members = [arg for arg in typing.get_args(node) if arg is not type(None)]
            if len(members) == 1:
                node = _unwrap(members[0])
            elif isinstance(part, str):  # a member's tag: not the user's
                node = _member(node, part)
                continue
        out.append(part)
        if node is None:
            continue
        origin = typing.get_origin(node)
        if isinstance(node, type) and (dataclasses.is_dataclass(node) or issubclass(node, BaseModel)):
            try:
                node = typing.get_type_hints(node, include_extras=True).get(part)
            except Exception:  # an annotation that does not resolve: the rest as pydantic gives it
                node = None
        elif origin in (list, set, frozenset) and isinstance(part, int):
            node = typing.get_args(node)[0]
        elif origin is tuple and isinstance(part, int):
            args = typing.get_args(node)
            node = args[0] if len(args) == 2 and args[1] is Ellipsis else (args[part] if part < len(args) else None)
        elif origin is dict:
            node = typing.get_args(node)[1]
        else:
            node = None
    return tuple(out)


def _got(item: dict) -> str:
    """", got '1.0e-3x'" for a value of the wrong type, so that the message shows what the file says."""
    value = item.get("input")
    if item["type"].endswith(("_parsing", "_type")) and isinstance(value, (str, int, float)) \
            and not isinstance(value, bool) and len(repr(value)) < 60:
        return f", got {value!r}"
    return ""


def _entry(document: dict | None, loc: tuple) -> str | None:
    """`expect[0] (its id)` / `variants[1] (its label)` for a path into a list of the study's entries."""
    if document is None or len(loc) < 2 or loc[0] not in ("expect", "variants") or not isinstance(loc[1], int):
        return None
    entries = document.get(loc[0])
    entry = entries[loc[1]] if isinstance(entries, list) and loc[1] < len(entries) else None
    key = "id" if loc[0] == "expect" else "label"
    name = entry.get(key) if isinstance(entry, dict) and loc[2:3] != (key,) else None  # not a bad name itself
    return f"{loc[0]}[{loc[1]}]" + (f" ({name})" if isinstance(name, str) else "")


def format_pydantic(error: ValidationError, prefix: str, root: type, document: dict | None = None) -> list[str]:
    """One message per pydantic error, named by its path under `prefix` (a study section or a row's name), as
    the file spells it; `document`: the study's, so that a claim or a variant is named by its id or label."""
    problems = []
    for item in error.errors():
        loc = user_loc(root, tuple(item["loc"]))
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
            valid = _fields_at(root, loc[:-1])
            message = (f"unknown key {loc[-1]!r}{did_you_mean(str(loc[-1]), valid)}"
                       + (f"; valid keys: {', '.join(valid)}" if valid else ""))
        elif item["type"] == "literal_error":  # "Input should be 'none', 'dape' or 'dapev2'"
            expected = str(item.get("ctx", {}).get("expected", ""))
            message += did_you_mean(item.get("input"), re.findall(r"'([^']*)'", expected))
        else:
            message += _got(dict(item))
        entry = _entry(document, loc) if prefix == "study" else None
        if entry is not None:
            rest = ".".join(str(part) for part in loc[2:])
            problems.append(f"{entry}: {rest}: {message}" if rest else f"{entry}: {message}")
            continue
        path = ".".join(str(part) for part in loc)
        if prefix in ("base", "study"):
            problems.append(f"{prefix}.{path}: {message}" if path else f"{prefix}: {message}")
        else:
            problems.append(f"{prefix}: {path}: {message}" if path else f"{prefix}: {message}")
    return problems

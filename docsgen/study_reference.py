"""The study-file reference page, from the JSON Schema `orchestrator schema` prints
(`orchestrator.study.schema.study_json_schema()`): one table per object of the format (the study file, then each
section and claim kind it refers to, in the order they are first reached), one row per field with its type,
default and the description the model gives it. The guide (guides/study-files.md) explains; this lists."""

from __future__ import annotations

import json
import re


def schema() -> dict:
    from orchestrator.study.schema import study_json_schema

    return study_json_schema()


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def anchor(name: str) -> str:
    """The heading's id: "Study file" -> "def-study-file"."""
    return "def-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _type(node: dict) -> str:
    """A field's type in words, each object type a link to its table."""
    if "$ref" in node:
        name = _ref_name(node["$ref"])
        return f"[{name}](#{anchor(name)})"
    for key in ("anyOf", "oneOf", "allOf"):
        if key in node:
            return " or ".join(dict.fromkeys(_type(option) for option in node[key]))
    if "const" in node:
        return f"`{json.dumps(node['const'])}`"
    if "enum" in node:
        return " \\| ".join(f"`{json.dumps(value)}`" for value in node["enum"])
    kind = node.get("type")
    if kind == "array":
        items = node.get("items")
        if isinstance(items, dict) and items:
            return f"list of {_type(items)}"
        if "prefixItems" in node:
            return "[" + ", ".join(_type(item) for item in node["prefixItems"]) + "]"
        return "list"
    if kind == "object":
        values = node.get("additionalProperties")
        if isinstance(values, dict) and values:
            return f"map of {_type(values)}"
        return "map"
    if isinstance(kind, list):
        return " or ".join(kind)
    return kind or "any"


def _limits(node: dict) -> str:
    words = {"minimum": "≥", "exclusiveMinimum": ">", "maximum": "≤", "exclusiveMaximum": "<",
             "minLength": "length ≥", "maxLength": "length ≤", "minItems": "items ≥", "maxItems": "items ≤"}
    found = [f"{word} {node[key]}" for key, word in words.items() if key in node]
    for option in node.get("anyOf", []):
        found += [f"{word} {option[key]}" for key, word in words.items() if key in option]
    return ", ".join(dict.fromkeys(found))


def _cell(text) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


_NOTE = re.compile(r"(?:^|\n|(?<=\. ))[ \t]*([a-z][a-z_0-9]*(?: / [a-z][a-z_0-9]*)*): ")


def field_notes(description: str, fields) -> tuple[str, dict[str, str]]:
    """A config's docstring split into its introduction and the note it gives each field: dape_core's configs
    describe their fields in the docstring ("preset: a key of PRESETS; ..."), one after the other."""
    fields = set(fields)
    marks = [match for match in _NOTE.finditer(description)
             if all(name in fields for name in match.group(1).split(" / "))]
    if not marks:
        return description, {}
    notes: dict[str, str] = {}
    for index, match in enumerate(marks):
        end = marks[index + 1].start() if index + 1 < len(marks) else len(description)
        text = " ".join(description[match.end():end].split())
        for name in match.group(1).split(" / "):
            notes[name] = f"{notes[name]} {text}" if name in notes else text
    return description[:marks[0].start()], notes


def objects(document: dict) -> list[tuple[str, dict]]:
    """The schema's objects, the study file first, then each definition in the order it is first referred to
    (breadth first), then any definition nothing refers to."""
    definitions = document.get("$defs", {})
    order = [("Study file", document)]
    seen = {"Study file"}
    queue = [document]
    while queue:
        node = queue.pop(0)
        for ref in _refs(node):
            name = _ref_name(ref)
            if name not in seen and name in definitions:
                seen.add(name)
                order.append((name, definitions[name]))
                queue.append(definitions[name])
    order += [(name, node) for name, node in definitions.items() if name not in seen]
    return order


def where(document: dict) -> dict[str, str]:
    """Each definition's place in a study file, as a dotted path from the top (`base.train` for TrainConfig,
    `expect[]` for a claim kind), where it is first reached."""
    definitions = document.get("$defs", {})
    found: dict[str, str] = {}
    queue = [("", document)]
    while queue:
        path, node = queue.pop(0)
        for field, spec in node.get("properties", {}).items():
            is_list = spec.get("type") == "array" or any(option.get("type") == "array"
                                                         for option in spec.get("anyOf", []))
            is_map = isinstance(spec.get("additionalProperties"), dict) and bool(_refs(spec["additionalProperties"]))
            child = f"{path}.{field}".lstrip(".") + ("[]" if is_list else "") + (".<key>" if is_map else "")
            for ref in _refs(spec):
                name = _ref_name(ref)
                if name in definitions and name not in found:
                    found[name] = child
                    queue.append((child, definitions[name]))
    return found


def _refs(node) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        for key, value in node.items():
            if key != "$defs":
                found += _refs(value)
        return found
    if isinstance(node, list):
        return [ref for item in node for ref in _refs(item)]
    return []


def render(document: dict | None = None) -> str:
    document = document or schema()
    lines = ["# Study file reference", "",
             "Generated from the study format's JSON Schema (`orchestrator schema` prints it; "
             "`studies/study.schema.json` is a copy for editors) at each build of this site. How to write a study "
             "file, with examples, is the guide [Writing a study file](../guides/study-files.md); the claims of "
             "`expect:` are explained in [Claims and decisions](../guides/claims.md).", ""]
    places = where(document)
    for name, node in objects(document):
        heading = "The study file (top level)" if name == "Study file" else f"`{name}`"
        lines += [f"## {heading} {{#{anchor(name)}}}", ""]
        if name in places:
            lines += [f"In a study file: `{places[name]}`.", ""]
        properties = node.get("properties", {})
        intro, notes = field_notes(node.get("description", ""), properties)
        if intro.strip():
            lines += [" ".join(intro.split()), ""]
        if not properties:
            lines += [f"Type: {_type(node)}.", ""]
            continue
        required = set(node.get("required", []))
        lines += ["| field | type | default | what it is |", "|---|---|---|---|"]
        for field, spec in properties.items():
            default = "required" if field in required else (
                f"`{json.dumps(spec['default'])}`" if "default" in spec else "")
            description = spec.get("description") or notes.get(field, "")
            limits = _limits(spec)
            text = f"{description} ({limits})" if limits else description
            lines.append(f"| `{field}` | {_type(spec)} | {_cell(default)} | {_cell(text)} |")
        lines.append("")
    return "\n".join(lines)

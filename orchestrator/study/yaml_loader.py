"""Reading a study's YAML so that the file means exactly one thing, and reading it cannot exhaust the machine.

PyYAML's `safe_load` keeps the last of two equal keys (`train: {steps: 50000, steps: 5}` silently trains 5
steps) and expands aliases without bound (a "billion laughs" file of a few lines grows to 9^9 nodes). The
loader here is `SafeLoader` (plain data only, never Python objects) with three additions, all checked while
the document is composed, before any value is built:
- a key given twice in one mapping is recorded with its field path and both lines (every one of them is
  reported, with the study's other problems);
- the document may nest at most MAX_DEPTH levels and hold at most MAX_NODES nodes with every alias
  expanded (counted bottom-up, so a bomb fails at its first level past the bound, in milliseconds);
- an alias to the node that contains it (a recursive structure) is refused.
A study file is a few hundred nodes; the bounds leave two orders of magnitude of room.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_BYTES = 1 << 20  # a study file is a few KB
MAX_DEPTH = 32  # levels of nested mappings and lists
MAX_NODES = 20_000  # nodes with every alias expanded


class DocumentTooLarge(yaml.YAMLError):
    """The document is beyond the bounds above; its message says which and where."""


def _path(parts: list) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


class StudyLoader(yaml.SafeLoader):
    """SafeLoader that records duplicate keys in `duplicates` and bounds the document's size."""

    def __init__(self, stream):
        super().__init__(stream)
        self.duplicates: list[str] = []
        self._path: list = []  # the field path of the node being composed
        self._sizes: dict[int, int] = {}  # id(node) -> nodes in it, aliases expanded (set once composed)

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            node = super().compose_node(parent, index)
            if id(node) not in self._sizes:
                raise DocumentTooLarge(f"line {mark.line + 1}: an alias refers to a node that contains it "
                                       "(a recursive structure); a study file is a tree of plain values")
            return node
        pushed = index is not None  # None: the root, or a mapping's key
        if pushed:
            self._path.append(index.value if isinstance(index, yaml.ScalarNode) else index)
        if len(self._path) > MAX_DEPTH:
            raise DocumentTooLarge(f"{_path(self._path)}: nested deeper than {MAX_DEPTH} levels "
                                   f"(line {self.peek_event().start_mark.line + 1})")
        try:
            node = super().compose_node(parent, index)
            self._sizes[id(node)] = size = self._size(node)
            if size > MAX_NODES:
                raise DocumentTooLarge(
                    f"{_path(self._path)} (line {node.start_mark.line + 1}): with its aliases expanded this value "
                    f"holds more than {MAX_NODES} nodes, where a study file has a few hundred (an alias bomb?)")
        finally:
            if pushed:
                self._path.pop()
        return node

    def _size(self, node: yaml.Node) -> int:
        if isinstance(node, yaml.ScalarNode):
            return 1
        if isinstance(node, yaml.SequenceNode):
            return 1 + sum(self._sizes[id(child)] for child in node.value)
        return 1 + sum(self._sizes[id(key)] + self._sizes[id(value)] for key, value in node.value)

    def compose_mapping_node(self, anchor):
        node = super().compose_mapping_node(anchor)
        first_line: dict[tuple[str, str], int] = {}
        for key, _ in node.value:
            if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                continue
            line = key.start_mark.line + 1
            if (key.tag, key.value) in first_line:
                where = _path(self._path)
                self.duplicates.append(
                    f"{where + '.' if self._path else ''}{key.value}: the key is given twice (lines "
                    f"{first_line[(key.tag, key.value)]} and {line}); YAML would silently keep only the last "
                    "value: give it once")
            else:
                first_line[(key.tag, key.value)] = line
        return node


def load_yaml(text: str) -> tuple[Any, list[str]]:
    """(the document, its duplicate-key problems). Raises yaml.YAMLError (DocumentTooLarge included)."""
    if len(text) > MAX_BYTES:
        raise DocumentTooLarge(f"{len(text)} characters, more than {MAX_BYTES}; a study file is a few KB")
    loader = StudyLoader(text)
    try:
        return loader.get_single_data(), loader.duplicates
    finally:
        loader.dispose()

"""Dotted overrides (`model.kernel_size: 3`) of a trial config (variants, axes, search samples) and of the
study document (profiles, `key=value` on the command line: load.py's `apply_study_overrides`, which knows the
study's fields)."""

from __future__ import annotations

import copy
from typing import Any

import yaml


def set_dotted(config: dict, dotted_key: str, value: Any) -> None:
    *parents, leaf = dotted_key.split(".")
    node = config
    for key in parents:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ValueError(f"{dotted_key!r}: {key!r} is not a section")
    node[leaf] = value


def resolve(base: dict, overrides: dict[str, Any]) -> dict:
    config = copy.deepcopy(base)
    for key, value in overrides.items():
        set_dotted(config, key, value)
    return config


def parse_override(text: str) -> tuple[str, Any]:
    """`key=value` from the command line; the value is read as YAML (numbers, lists, booleans), with the study
    file's loader (no duplicate keys, bounded size)."""
    from .yaml_loader import load_yaml

    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"override {text!r} is not of the form key=value")
    try:
        parsed, duplicates = load_yaml(value)
    except yaml.YAMLError as error:
        reason = " ".join(str(getattr(error, "problem", None) or error).split())
        raise ValueError(f"override {text!r}: the value {value!r} is not valid YAML ({reason}); quote it to "
                         f"give it as text, e.g. {key.strip()}='\"{value}\"'") from None
    if duplicates:
        raise ValueError(f"override {text!r}: {'; '.join(duplicates)}")
    return key.strip(), parsed

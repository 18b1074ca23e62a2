"""Value checks shared by the config dataclasses' field validators, so every section words its errors alike."""

from __future__ import annotations

from typing import Iterable, TypeVar

T = TypeVar("T")


def one_of(value: T, valid: Iterable[T], what: str) -> T:
    """`value` if it is one of `valid`, else an error that lists the valid names."""
    valid = list(valid)
    if value not in valid:
        raise ValueError(f"unknown {what} {value!r}; valid: {', '.join(map(str, valid))}")
    return value


def positive_int(value: int) -> int:
    if value < 1:
        raise ValueError(f"must be a positive integer (got {value})")
    return value


def positive_int_or_none(value: int | None) -> int | None:
    return value if value is None else positive_int(value)

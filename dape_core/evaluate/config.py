"""The `eval:` section of an experiment (SPEC §6)."""

from __future__ import annotations

import math

from pydantic import ConfigDict, field_validator, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from ..checks import one_of, positive_int, positive_int_or_none

DEFAULT_TOKENS_PER_LENGTH = 2048  # 64 windows scored on their last 32 tokens
EVAL_SPLITS = ("validation", "test")


@pydantic_dataclass(config=ConfigDict(extra="forbid"))
class EvalConfig:
    """lengths: evaluation lengths (each ≥ the training length). tail_tokens: K, the scored last positions
    of every window (256 at paper scale). tokens_per_length: scored tokens per length, the same budget at
    every length (windows = budget / K, the same document tails at every length); or give n_windows
    instead (default budget: 2048 tokens). batch_size: windows per forward pass. split: the held-out split
    evaluated (`test` needs data.test_fraction > 0). timing: ms per evaluation batch at every length,
    timed on the evaluation's own batches (the first timing_warmup dropped, then the median; extra passes
    only when fewer than timing_reps batches remain). visualise: heat maps of the bias and processed
    logits of one query row at the longest length, per layer and head."""

    lengths: list[int]
    tail_tokens: int = 32
    n_windows: int | None = None
    tokens_per_length: int | None = None
    batch_size: int = 8
    seed: int = 0
    split: str = "validation"
    timing: bool = True
    timing_warmup: int = 1
    timing_reps: int = 3
    visualise: bool = False

    @field_validator("lengths")
    @classmethod
    def _sorted_positive(cls, value: list[int]) -> list[int]:
        if not value:
            raise ValueError("needs at least one evaluation length")
        if any(length < 1 for length in value):
            raise ValueError(f"evaluation lengths must be positive (got {value})")
        if len(set(value)) != len(value):
            raise ValueError(f"evaluation lengths repeat (got {value})")
        return sorted(value)

    @field_validator("tail_tokens", "batch_size", "timing_reps")
    @classmethod
    def _positive(cls, value: int) -> int:
        return positive_int(value)

    @field_validator("n_windows", "tokens_per_length")
    @classmethod
    def _positive_or_none(cls, value: int | None) -> int | None:
        return positive_int_or_none(value)

    @field_validator("timing_warmup")
    @classmethod
    def _not_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"must be >= 0 (got {value})")
        return value

    @field_validator("split")
    @classmethod
    def _known_split(cls, value: str) -> str:
        return one_of(value, EVAL_SPLITS, "split")

    @model_validator(mode="after")
    def _one_budget(self) -> "EvalConfig":
        if self.n_windows is not None and self.tokens_per_length is not None:
            raise ValueError("give eval.tokens_per_length or eval.n_windows, not both (both set the scored-token "
                             "budget: tokens_per_length = n_windows x tail_tokens)")
        return self

    @property
    def windows_per_length(self) -> int:
        if self.n_windows is not None:
            return self.n_windows
        return math.ceil((self.tokens_per_length or DEFAULT_TOKENS_PER_LENGTH) / self.tail_tokens)

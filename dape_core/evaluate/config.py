"""The `eval:` section of an experiment (docs/method.md §6)."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import AfterValidator, ConfigDict, Field, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from ..types import NonNegativeInt, PositiveInt, Seed, StrictBool

# The evaluation protocol's version (docs/protocol.md), recorded with every per-length metric it produced:
# 1: windows were slots of (longest length) + 1 tokens inside one held-out document, so a length added later drew
#    other text; 2: tails fixed in the held-out token stream (`dape_core.data.tail_windows`), so every length,
#    whenever it is evaluated, scores the same tokens. Here, beside the `eval:` section and free of torch, so
#    that the orchestrator reads it without loading a model.
PROTOCOL_VERSION = 2
DEFAULT_TOKENS_PER_LENGTH = 2048  # 64 windows scored on their last 32 tokens
EvalSplit = Literal["validation", "test"]


def _distinct_sorted(lengths: list[int]) -> list[int]:
    if len(set(lengths)) != len(lengths):
        raise ValueError(f"evaluation lengths repeat (got {lengths})")
    return sorted(lengths)


Lengths = Annotated[list[PositiveInt], Field(min_length=1), AfterValidator(_distinct_sorted)]


@pydantic_dataclass(config=ConfigDict(extra="forbid"))
class EvalConfig:
    """lengths: evaluation lengths (each ≥ the training length). tail_tokens: K, the scored last positions
    of every window (256 at paper scale). tokens_per_length: scored tokens per length, the same budget at
    every length (windows = budget / K, the same stream tails at every length: docs/protocol.md); or give n_windows
    instead (default budget: 2048 tokens). batch_size: windows per forward pass. split: the held-out split
    evaluated (`test` needs data.test_fraction > 0). timing: ms per evaluation batch at every length,
    timed on the evaluation's own batches (the first timing_warmup dropped, then the median; extra passes
    only when fewer than timing_reps batches remain). visualise: heat maps of the bias and processed
    logits of one query row at the longest length, per layer and head."""

    lengths: Lengths
    tail_tokens: PositiveInt = 32
    n_windows: PositiveInt | None = None
    tokens_per_length: PositiveInt | None = None
    batch_size: PositiveInt = 8
    seed: Seed = 0
    split: EvalSplit = "validation"
    timing: StrictBool = True
    timing_warmup: NonNegativeInt = 1
    timing_reps: PositiveInt = 3
    visualise: StrictBool = False

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

"""The papers' evaluation protocol (SPEC §6): perplexity by evaluation length on the last K tokens."""

from __future__ import annotations

import math

import torch
from pydantic import ConfigDict, field_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass
from torch.nn import functional as F


@pydantic_dataclass(config=ConfigDict(extra="forbid"))
class EvalConfig:
    """lengths: evaluation lengths (each ≥ the training length). tail_tokens: K, the scored last positions
    of every window. n_windows: windows per length (the same document tails at every length).
    batch_size: windows per forward pass."""

    lengths: list[int]
    tail_tokens: int = 32
    n_windows: int = 64
    batch_size: int = 8
    seed: int = 0

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

    @field_validator("tail_tokens", "n_windows", "batch_size")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"must be a positive integer (got {value})")
        return value


@torch.no_grad()
def tail_loss(model: torch.nn.Module, windows: torch.Tensor, tail: int, batch_size: int) -> float:
    """Mean next-token loss on the last `tail` positions of each window (inputs = window[:-1])."""
    model.eval()
    total, count = 0.0, 0
    for chunk in windows.split(batch_size):
        inputs, targets = chunk[:, :-1], chunk[:, -tail:]
        logits = model(inputs)[:, -tail:]
        total += F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum").item()
        count += targets.numel()
    return total / count


def perplexity_by_length(model: torch.nn.Module, windows: dict[int, torch.Tensor], cfg: EvalConfig) -> dict[int, float]:
    """`windows[L]` holds L+1 tokens per row so that the model reads L tokens and predicts the last K."""
    return {length: math.exp(tail_loss(model, rows, cfg.tail_tokens, cfg.batch_size)) for length, rows in windows.items()}

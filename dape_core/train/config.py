"""The `train:` section of an experiment, with the papers' optimizer defaults (SPEC §5)."""

from __future__ import annotations

import re

from pydantic import ConfigDict, field_validator, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from ..checks import one_of, positive_int

PRECISIONS = ("auto", "fp32", "bf16", "fp16")


@pydantic_dataclass(config=ConfigDict(extra="forbid"))
class TrainConfig:
    """steps: optimizer steps. batch_size: sequences per step, split into `grad_accum` micro-batches.
    seq_len: the training length. lr: peak learning rate, decayed by a cosine to lr/10 after a linear
    warmup over `warmup_fraction` of the steps. Adam β, eps, weight decay and the gradient clip default to
    the papers' values. precision: `auto` = bf16 on a GPU that has it (else fp16 with loss scaling), float32
    on CPU. device: `auto` = CUDA when available, else CPU. eval_every: validation loss every N steps on
    `val_tokens` held-out tokens (None = never; for pruning schedulers)."""

    steps: int = 600
    batch_size: int = 32
    seq_len: int = 64
    lr: float = 1e-3
    warmup_fraction: float = 0.01
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    grad_clip: float = 1.0
    grad_accum: int = 1
    precision: str = "auto"
    device: str = "auto"
    seed: int = 0
    log_every: int = 25
    eval_every: int | None = None
    val_tokens: int = 8192

    @field_validator("steps", "batch_size", "seq_len", "log_every", "grad_accum", "val_tokens")
    @classmethod
    def _positive(cls, value: int) -> int:
        return positive_int(value)

    @field_validator("eval_every")
    @classmethod
    def _positive_or_none(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise ValueError(f"must be a positive integer, or left out to never validate (got {value})")
        return value

    @field_validator("lr")
    @classmethod
    def _positive_lr(cls, value: float) -> float:
        if not value > 0:
            raise ValueError(f"learning rate must be > 0 (got {value})")
        return value

    @field_validator("warmup_fraction")
    @classmethod
    def _fraction(cls, value: float) -> float:
        if not 0.0 <= value < 1.0:
            raise ValueError(f"must be in [0, 1) (got {value})")
        return value

    @field_validator("grad_clip", "eps")
    @classmethod
    def _positive_float(cls, value: float) -> float:
        if not value > 0:
            raise ValueError(f"must be > 0 (got {value})")
        return value

    @field_validator("precision")
    @classmethod
    def _known_precision(cls, value: str) -> str:
        return one_of(value, PRECISIONS, "precision")

    @field_validator("device")
    @classmethod
    def _known_device(cls, value: str) -> str:
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", value):
            raise ValueError(f"unknown device {value!r}; valid: auto, cpu, cuda, cuda:N")
        return value

    @model_validator(mode="after")
    def _micro_batches(self) -> "TrainConfig":
        if self.batch_size % self.grad_accum:
            raise ValueError(f"batch_size {self.batch_size} is not divisible by grad_accum {self.grad_accum}: "
                             "each step splits its batch into grad_accum equal micro-batches")
        return self

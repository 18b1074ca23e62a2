"""The `train:` section of an experiment, with the papers' optimizer defaults (docs/method.md §5)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from ..types import Fraction, NonNegativeFloat, PositiveFloat, PositiveInt, Seed

PrecisionName = Literal["auto", "fp32", "bf16", "fp16"]
Device = Annotated[str, Field(pattern=r"^(auto|cpu|cuda(:\d+)?)$")]  # auto, cpu, cuda or cuda:N


@pydantic_dataclass(config=ConfigDict(extra="forbid"))
class TrainConfig:
    """steps: optimizer steps. batch_size: sequences per step, split into `grad_accum` micro-batches.
    seq_len: the training length. lr: peak learning rate, decayed by a cosine to lr/10 after a linear
    warmup over `warmup_fraction` of the steps. Adam β (each in [0, 1)), eps, weight decay and the gradient
    clip default to the papers' values. precision: `auto` = bf16 on a GPU that has it (else fp16 with loss
    scaling), float32 on CPU. device: `auto` = CUDA when available, else CPU (or `cpu`, `cuda`, `cuda:N`).
    seed: model init and data order, in [0, 2**32 - 1]. eval_every: validation loss every N steps on
    `val_tokens` held-out tokens (None = never; for pruning schedulers)."""

    steps: PositiveInt = 600
    batch_size: PositiveInt = 32
    seq_len: PositiveInt = 64
    lr: PositiveFloat = 1e-3
    warmup_fraction: Fraction = 0.01
    weight_decay: NonNegativeFloat = 0.1
    beta1: Fraction = 0.9
    beta2: Fraction = 0.95
    eps: PositiveFloat = 1e-8
    grad_clip: PositiveFloat = 1.0
    grad_accum: PositiveInt = 1
    precision: PrecisionName = "auto"
    device: Device = "auto"
    seed: Seed = 0
    log_every: PositiveInt = 25
    eval_every: PositiveInt | None = None
    val_tokens: PositiveInt = 8192

    @model_validator(mode="after")
    def _micro_batches(self) -> "TrainConfig":
        if self.batch_size % self.grad_accum:
            raise ValueError(f"batch_size {self.batch_size} is not divisible by grad_accum {self.grad_accum}: "
                             "each step splits its batch into grad_accum equal micro-batches")
        return self

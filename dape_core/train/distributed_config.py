"""The size of one trial (`DistributedConfig`): a config section, loaded without torch (validating a study
does not need it); `distributed.py` is what runs it."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict
from pydantic.dataclasses import dataclass as pydantic_dataclass

from ..types import PositiveInt

Parallelism = Literal["ddp", "fsdp"]


@pydantic_dataclass(config=ConfigDict(extra="forbid"))
class DistributedConfig:
    """The size of one trial. workers: processes that train it together (one GPU each on GPUs, one CPU
    process each on CPU). parallelism: `ddp` keeps a full replica of the model, gradients and optimizer
    state on every worker and averages gradients; `fsdp` shards parameters, gradients and optimizer state
    across the workers (FSDP2), all-gathering a layer's parameters only while it runs, and on a GPU with
    bfloat16 computes in bf16 and averages gradients in fp32. One worker runs as a plain single-device
    trial, whatever the parallelism."""

    workers: PositiveInt = 1
    parallelism: Parallelism = "ddp"

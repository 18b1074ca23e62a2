"""Device and numeric precision: CUDA when present else CPU; bf16/fp16 autocast on GPU, float32 on CPU."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_device(spec: str = "auto") -> torch.device:
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(f"train.device is {spec!r} but this machine has no CUDA device (or this PyTorch build "
                           "has no CUDA support); use 'auto' or 'cpu'")
    return torch.device(spec)


@dataclass(frozen=True)
class Precision:
    """fp32, or autocast to bf16 / fp16; fp16 also scales the loss so small gradients do not underflow."""

    name: str
    device_type: str

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[self.name]

    def autocast(self) -> AbstractContextManager:
        return torch.autocast(self.device_type, dtype=self.dtype, enabled=self.name != "fp32")

    def grad_scaler(self) -> torch.amp.GradScaler:
        return torch.amp.GradScaler(self.device_type, enabled=self.name == "fp16")


def resolve_precision(spec: str, device: torch.device) -> Precision:
    """`auto`: bf16 on a GPU that supports it, fp16 on an older one, float32 on CPU (CPU autocast is slow)."""
    if spec == "auto":
        if device.type == "cuda":
            spec = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        else:
            spec = "fp32"
    if spec == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise RuntimeError("train.precision is 'bf16' but this GPU does not support bfloat16; use 'fp16' or 'auto'")
    return Precision(spec, device.type)

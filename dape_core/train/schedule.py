"""AdamW with the papers' parameter groups, and the learning-rate schedule (docs/method.md §5)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .config import TrainConfig


def cosine_lr(step: int, cfg: TrainConfig) -> float:
    """Linear warmup, then cosine decay from lr to lr/10 at the last step."""
    warmup = max(1, int(cfg.warmup_fraction * cfg.steps))
    if step < warmup:
        return cfg.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, cfg.steps - warmup)
    floor = cfg.lr / 10
    return floor + (cfg.lr - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def multi_tensor(parameters: Sequence[torch.Tensor]) -> bool | None:
    """Whether the optimizer and the gradient clipping take their multi-tensor (`foreach`) path: on CPU, where
    PyTorch's default is a Python loop over the parameters (about 600 op calls a step for the main job's model,
    1.2 of its ~5.8 ms of update), plain tensors take it; it computes the same values, bit for bit, in the same
    order (tests/test_train_loop.py). None: PyTorch's own choice (the multi-tensor path on CUDA already; FSDP's
    sharded parameters)."""
    plain = all(type(p) is torch.nn.Parameter or type(p) is torch.Tensor for p in parameters)
    return True if plain and all(p.device.type == "cpu" for p in parameters) else None


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    # Weight decay on matrices only; norms, biases and per-head PE scalars are not decayed.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps,
                             foreach=multi_tensor(decay + no_decay))

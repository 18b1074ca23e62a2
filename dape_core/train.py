"""The trainer: AdamW, cosine schedule with warmup to lr/10, gradient clipping (SPEC §5).

It knows nothing of Ray or MLflow: progress goes to a `TrainerCallback` (a sink), which the orchestrator
implements to forward metrics to Ray Tune.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Protocol

import torch
from pydantic import ConfigDict, field_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from .data import TrainStream


@pydantic_dataclass(config=ConfigDict(extra="forbid"))
class TrainConfig:
    """steps: optimizer steps. seq_len: the training length. lr: peak learning rate, decayed by a cosine to
    lr/10 after a linear warmup over `warmup_fraction` of the steps. Adam β, eps, weight decay and the
    gradient clip default to the papers' values."""

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
    seed: int = 0
    log_every: int = 25

    @field_validator("steps", "batch_size", "seq_len", "log_every")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"must be a positive integer (got {value})")
        return value

    @field_validator("lr")
    @classmethod
    def _positive_lr(cls, value: float) -> float:
        if not value > 0:
            raise ValueError(f"learning rate must be > 0 (got {value})")
        return value


class TrainerCallback(Protocol):
    def on_step(self, step: int, loss: float, lr: float) -> None: ...


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN or infinite loss; the trial cannot continue."""


@dataclass
class TrainResult:
    final_loss: float
    train_seconds: float
    tokens_seen: int


def cosine_lr(step: int, cfg: TrainConfig) -> float:
    """Linear warmup, then cosine decay from lr to lr/10 at the last step."""
    warmup = max(1, int(cfg.warmup_fraction * cfg.steps))
    if step < warmup:
        return cfg.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, cfg.steps - warmup)
    floor = cfg.lr / 10
    return floor + (cfg.lr - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    # Weight decay on matrices only; norms, biases and per-head PE scalars are not decayed.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps)


def train(model: torch.nn.Module, stream: TrainStream, cfg: TrainConfig, callback: TrainerCallback | None = None) -> TrainResult:
    optimizer = make_optimizer(model, cfg)
    model.train()
    started = time.perf_counter()
    running, loss_value = None, float("nan")
    for step in range(cfg.steps):
        lr = cosine_lr(step, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        inputs, targets = stream.batch(cfg.batch_size, cfg.seq_len)
        _, loss = model(inputs, targets)
        loss_value = loss.item()
        if not math.isfinite(loss_value):
            raise NonFiniteLossError(f"loss became {loss_value} at step {step + 1}")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        # Smoothed loss for reporting; the raw per-step loss is noisy at small batch sizes.
        running = loss_value if running is None else 0.9 * running + 0.1 * loss_value
        if callback is not None and ((step + 1) % cfg.log_every == 0 or step + 1 == cfg.steps):
            callback.on_step(step + 1, running, lr)
    return TrainResult(final_loss=running, train_seconds=time.perf_counter() - started,
                       tokens_seen=cfg.steps * cfg.batch_size * cfg.seq_len)

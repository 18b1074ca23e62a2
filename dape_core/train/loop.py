"""The training loop: AdamW, cosine schedule, clipping, gradient accumulation, mixed precision,
periodic validation, checkpoint and resume, and a stop with a clear reason on a non-finite loss."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..data import TrainStream
from .callbacks import notify
from .checkpoint import CheckpointStore
from .config import TrainConfig
from .precision import Precision, resolve_precision
from .schedule import cosine_lr, make_optimizer

TIMING_WARMUP_STEPS = 5  # the first steps (allocations, lazy init) are left out of ms_per_step


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN or infinite loss; the trial cannot continue."""


@dataclass
class TrainResult:
    final_loss: float
    train_seconds: float
    tokens_seen: int
    ms_per_step: float | None = None  # median wall time of one optimizer step (forward + backward + update)
    resumed_from: int | None = None  # the checkpoint step this run continued from
    val_history: list[tuple[int, float]] = field(default_factory=list)
    precision: str = "fp32"


def _rng_state(stream: TrainStream) -> dict:
    state = {"torch": torch.get_rng_state(), "stream": stream.generator.get_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _restore_rng(state: dict, stream: TrainStream) -> None:
    torch.set_rng_state(state["torch"].cpu())
    stream.generator.set_state(state["stream"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def train(model: torch.nn.Module, stream: TrainStream, cfg: TrainConfig, callback=None, *,
          precision: Precision | None = None, validate: Callable[[], float] | None = None,
          checkpoints: CheckpointStore | None = None, checkpoint_every: int | None = None,
          resume: bool = True) -> TrainResult:
    """Train `model` (already on its device) for `cfg.steps` steps of batches from `stream`.

    validate: returns a held-out loss; called every `cfg.eval_every` steps and at the end.
    checkpoints: where to save every `checkpoint_every` steps and at the end; with `resume`, an existing
    checkpoint there is loaded first and training continues from its step.
    """
    device = next(model.parameters()).device
    precision = precision or resolve_precision(cfg.precision, device)
    optimizer = make_optimizer(model, cfg)
    scaler = precision.grad_scaler()
    start, running, seconds_before, ms_before = 0, None, 0.0, None
    val_history: list[tuple[int, float]] = []
    if checkpoints is not None and resume and checkpoints.exists():
        state = checkpoints.load(device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scaler.load_state_dict(state["scaler"])
        _restore_rng(state["rng"], stream)
        start, running = int(state["step"]), state["running_loss"]
        seconds_before, ms_before = float(state["train_seconds"]), state["ms_per_step"]
        val_history = [(int(step), float(loss)) for step, loss in state["val_history"]]
    resumed_from = start if start else None

    micro_batch = cfg.batch_size // cfg.grad_accum
    step_ms: list[float] = []
    started = time.perf_counter()
    model.train()
    for step in range(start, cfg.steps):
        step_started = time.perf_counter()
        lr = cosine_lr(step, cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        inputs, targets = stream.batch(cfg.batch_size, cfg.seq_len)
        inputs, targets = inputs.to(device, non_blocking=True), targets.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), device=device)
        for micro_inputs, micro_targets in zip(inputs.split(micro_batch), targets.split(micro_batch)):
            with precision.autocast():
                _, loss = model(micro_inputs, micro_targets)
            loss_sum += loss.detach().float()
            scaler.scale(loss / cfg.grad_accum).backward()
        loss_value = loss_sum.item() / cfg.grad_accum  # one device sync per step
        if not math.isfinite(loss_value):
            raise NonFiniteLossError(f"training loss became {loss_value} at step {step + 1} (lr {lr:.3g}, precision "
                                     f"{precision.name}); the trial was stopped before the update")
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        scaler.step(optimizer)
        scaler.update()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        step_ms.append(1000 * (time.perf_counter() - step_started))
        # Smoothed loss for reporting; the raw per-step loss is noisy at small batch sizes.
        running = loss_value if running is None else 0.9 * running + 0.1 * loss_value
        done = step + 1
        if callback is not None and (done % cfg.log_every == 0 or done == cfg.steps):
            callback.on_step(done, running, lr)
        if validate is not None and cfg.eval_every and (done % cfg.eval_every == 0 or done == cfg.steps):
            val_loss = validate()
            model.train()
            val_history.append((done, val_loss))
            notify(callback, "on_validation", done, val_loss)
        if checkpoints is not None and ((checkpoint_every and done % checkpoint_every == 0) or done == cfg.steps):
            state = {
                "step": done, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "scaler": scaler.state_dict(), "rng": _rng_state(stream), "running_loss": running,
                "train_seconds": seconds_before + time.perf_counter() - started,
                "ms_per_step": _median_step_ms(step_ms, ms_before), "val_history": [list(v) for v in val_history],
            }
            notify(callback, "on_checkpoint", done, checkpoints.save(state))
    return TrainResult(
        final_loss=running, train_seconds=seconds_before + time.perf_counter() - started,
        tokens_seen=cfg.steps * cfg.batch_size * cfg.seq_len, ms_per_step=_median_step_ms(step_ms, ms_before),
        resumed_from=resumed_from, val_history=val_history, precision=precision.name,
    )


def _median_step_ms(step_ms: list[float], fallback: float | None) -> float | None:
    if not step_ms:
        return fallback
    warm = step_ms[TIMING_WARMUP_STEPS:] if len(step_ms) > 2 * TIMING_WARMUP_STEPS else step_ms[len(step_ms) // 2 :]
    return statistics.median(warm)

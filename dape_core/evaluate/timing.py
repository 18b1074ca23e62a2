"""Time and memory cost (docs/method.md §6): ms per forward at each evaluation length (warm-up, then the median),
and the peak memory of the trial."""

from __future__ import annotations

import resource
import statistics
import sys
import time
from contextlib import nullcontext

import torch


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def forward_ms(model: torch.nn.Module, inputs: torch.Tensor, warmup: int, reps: int, precision=None) -> float:
    """Median wall time of one forward pass over `inputs` [B, L], after `warmup` untimed passes."""
    model.eval()
    device = next(model.parameters()).device
    inputs = inputs.to(device)
    autocast = precision.autocast() if precision is not None else nullcontext()
    times = []
    for rep in range(warmup + reps):
        _sync(device)
        started = time.perf_counter()
        with autocast:
            model(inputs)
        _sync(device)
        if rep >= warmup:
            times.append(1000 * (time.perf_counter() - started))
    return statistics.median(times)


def forward_ms_by_length(model: torch.nn.Module, windows: dict[int, torch.Tensor], batch_size: int, warmup: int,
                         reps: int, precision=None) -> dict[int, float]:
    """ms per forward of one evaluation batch (`batch_size` windows of L tokens) at each length L."""
    return {length: forward_ms(model, rows[:batch_size, :-1], warmup, reps, precision)
            for length, rows in sorted(windows.items())}


def forward_ms_from_evaluation(model: torch.nn.Module, windows: dict[int, torch.Tensor],
                               batch_ms: dict[int, list[float]], cfg, precision=None) -> dict[int, float]:
    """ms per evaluation batch at each length, from the batches the evaluation already ran: the first
    `cfg.timing_warmup` are dropped and the median of the rest taken. A length with fewer than
    `cfg.timing_reps` timed batches left gets extra passes over its first batch (the evaluation has already
    warmed it up)."""
    from .perplexity import tail_loss

    out = {}
    for length, rows in sorted(windows.items()):
        samples = list(batch_ms.get(length, []))[cfg.timing_warmup :]
        while len(samples) < cfg.timing_reps:
            tail_loss(model, rows[: cfg.batch_size], cfg.tail_tokens, cfg.batch_size, precision, samples)
        out[length] = statistics.median(samples)
    return out


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_bytes(device: torch.device) -> int:
    """CUDA: the allocator's peak since `reset_peak_memory`. CPU: the process's peak resident set size
    (includes the Python runtime and the corpus, so compare it only between trials of one setup)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # macOS reports bytes, Linux KiB

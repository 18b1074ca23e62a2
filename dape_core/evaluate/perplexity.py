"""Perplexity by evaluation length on the last K tokens, and ΔP, the information gain of long context."""

from __future__ import annotations

import math
import time
from contextlib import contextmanager, nullcontext

import torch
from torch.nn import functional as F

from .config import EvalConfig


@contextmanager
def tail_logits_only(model: torch.nn.Module, tail: int):
    """Project only the last `tail` positions to the vocabulary: at L = 8192 with a 50k vocabulary the full
    logits would take gigabytes. Uses a forward hook on the final norm (`model.ln_final`) when the model has
    one; otherwise the model's full logits are sliced afterwards."""
    norm = getattr(model, "ln_final", None)
    if norm is None:
        yield
        return
    handle = norm.register_forward_hook(lambda module, args, output: output[:, -tail:])
    try:
        yield
    finally:
        handle.remove()


@torch.no_grad()
def tail_loss(model: torch.nn.Module, windows: torch.Tensor, tail: int, batch_size: int, precision=None,
              batch_ms: list[float] | None = None) -> float:
    """Mean next-token loss on the last `tail` positions of each window (inputs = window[:-1]).

    batch_ms: when given, the wall time of every full batch (transfer, forward, loss) is appended to it, so
    the evaluation itself provides the forward timing at no extra cost. Only the last `tail` positions
    are projected to the vocabulary (and, for a model with `supports_tail`, only they are computed in its last
    layer: `CausalLM.forward(tail=)`), so this is the time of the evaluation's forward, not of a full one."""
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    autocast = precision.autocast() if precision is not None else nullcontext()
    timed_size = min(batch_size, len(windows))  # a trailing partial batch is not timed
    for chunk in windows.split(batch_size):
        if batch_ms is not None and device.type == "cuda":
            torch.cuda.synchronize(device)
        started = time.perf_counter()
        chunk = chunk.to(device, non_blocking=True)
        inputs, targets = chunk[:, :-1], chunk[:, -tail:]
        if getattr(model, "supports_tail", False):  # only the last layer's tail rows, and their logits
            with autocast:
                logits = model(inputs, tail=tail)
        else:
            with tail_logits_only(model, tail), autocast:
                logits = model(inputs)[:, -tail:]
        total += F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="sum").item()  # syncs
        if batch_ms is not None and len(chunk) == timed_size:
            batch_ms.append(1000 * (time.perf_counter() - started))
        count += targets.numel()
    return total / count


def perplexity_by_length(model: torch.nn.Module, windows: dict[int, torch.Tensor], cfg: EvalConfig,
                         precision=None, batch_ms: dict[int, list[float]] | None = None) -> dict[int, float]:
    """`windows[L]` holds L+1 tokens per row so that the model reads L tokens and predicts the last K.
    batch_ms: when given, filled with the wall time of each full evaluation batch per length."""
    out = {}
    for length, rows in sorted(windows.items()):
        samples = batch_ms.setdefault(length, []) if batch_ms is not None else None
        out[length] = math.exp(tail_loss(model, rows, cfg.tail_tokens, cfg.batch_size, precision, samples))
    return out


def delta_p(perplexity: dict[int, float], train_length: int) -> dict[int, float]:
    """ΔP(L) = P(last T_train tokens only) − P(all L tokens), both on the same last K tokens (docs/method.md §6).

    The window of the training length is the tail of every longer window, so `perplexity[train_length]` is
    the model reading only the last T_train tokens. ΔP > 0: context beyond the training length helps;
    ≈ 0: the model behaves like local attention; < 0: extra context hurts (RoPE).
    """
    if train_length not in perplexity:
        raise ValueError(f"ΔP needs the perplexity at the training length {train_length}")
    short = perplexity[train_length]
    return {length: short - value for length, value in sorted(perplexity.items()) if length >= train_length}

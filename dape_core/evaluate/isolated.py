"""The time cost of a trained model measured on its own (docs/method.md §6's time table): a training step and an
evaluation batch's forward at each evaluation length, after warm-ups, as the median and spread over repeats.

The caller makes sure nothing else runs on the device meanwhile (`orchestrator evaluate --time` times the
stored models one at a time). The training step is the trainer's own (`dape_core.train.train`: data, forward,
backward, clipping, AdamW update), run on a copy of the model, so that the model itself is not changed; the
forward is the evaluation's batch (`tail_loss`: the last K positions projected), as `ms_forward_<L>` is.
"""

from __future__ import annotations

import copy
import dataclasses
import statistics
import time

import torch

from .perplexity import tail_loss


def spread(samples: list[float]) -> dict[str, float]:
    """Median, first and third quartiles, min and max of the timed samples (ms)."""
    ordered = sorted(samples)
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    return {"median": statistics.median(ordered), "q1": q1, "q3": q3, "min": ordered[0], "max": ordered[-1],
            "n": len(ordered)}


def time_training_step(model: torch.nn.Module, cfg, corpus, precision, warmup: int, repeats: int) -> dict[str, float]:
    """ms per training step of `cfg.train` (its batch, accumulation, precision) on a copy of `model`: `warmup`
    untimed steps, then `repeats` timed ones (the time between the trainer's step callbacks)."""
    from ..data import TrainStream
    from ..train import train
    from ..train.callbacks import TrainerCallback

    class StepClock(TrainerCallback):
        def __init__(self) -> None:
            self.stamps: list[float] = []

        def on_step(self, step: int, loss: float, lr: float) -> None:
            self.stamps.append(time.perf_counter())

    clock = StepClock()
    steps = warmup + repeats + 1  # the first timed step is measured from the end of the last warm-up step
    train_cfg = dataclasses.replace(cfg.train, steps=steps, log_every=1, eval_every=None)
    stream = TrainStream(corpus.stream_regions(), cfg.train.seq_len, seed=cfg.train.seed)
    trainee = copy.deepcopy(model).train()
    train(trainee, stream, train_cfg, clock, precision=precision)
    intervals = [1000 * (b - a) for a, b in zip(clock.stamps, clock.stamps[1:])]
    return spread(intervals[warmup:])


def time_forward(model: torch.nn.Module, windows: dict[int, torch.Tensor], cfg, precision, warmup: int,
                 repeats: int) -> dict[int, dict[str, float]]:
    """ms per evaluation batch (`cfg.eval.batch_size` windows, the last `tail_tokens` projected) at each length."""
    out = {}
    for length, rows in sorted(windows.items()):
        batch = rows[: cfg.eval.batch_size]
        samples: list[float] = []
        for _ in range(warmup):
            tail_loss(model, batch, cfg.eval.tail_tokens, cfg.eval.batch_size, precision)
        while len(samples) < repeats:
            tail_loss(model, batch, cfg.eval.tail_tokens, cfg.eval.batch_size, precision, samples)
        out[length] = spread(samples)
    return out

"""The training loop, one for every experiment: AdamW, cosine schedule, clipping, gradient accumulation,
mixed precision, periodic validation, checkpoint and resume, and a stop with a clear reason on a non-finite
loss.

    result = train(model, batches, cfg, callback, loss=lm_loss, validate=..., checkpoints=store)

What differs between experiments comes in as two objects:
- `batches`, a `BatchSource`: `batch(size)` returns one micro-batch (anything with `.to(device)` and
  `num_tokens`), and `state_dict()` / `load_state_dict()` carry its random state through a checkpoint. The LM
  experiment passes a `dape_core.data.TrainStream`, CHE its task sampler (`dape_core.che.experiment`).
- `loss(model, batch)`, the scalar to minimise: `lm_loss` for the LM, a masked cross-entropy for CHE.

On several processes (`torch.distributed`) the same loop runs on every rank: the model passed in is the
wrapped one (DDP or FSDP2, see `distributed.py`), each rank's batch source gives its own rows of every global
batch, the step's loss is averaged over the ranks, and checkpoints are sharded (`sharded_checkpoint.py`).
Rank 0 reports; see `train`'s `world` and `callback`.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

import torch
from torch import nn

from .callbacks import notify
from .checkpoint import CheckpointStore
from .config import TrainConfig
from .distributed import World, gradient_sync
from .precision import Precision, resolve_precision
from .schedule import cosine_lr, make_optimizer, multi_tensor
from .sharded_checkpoint import load_full_state

TIMING_WARMUP_STEPS = 5  # the first steps (allocations, lazy init) are left out of ms_per_step


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN or infinite loss; the trial cannot continue."""


class BatchSource(Protocol):
    def batch(self, batch_size: int) -> Any: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


LossFunction = Callable[[nn.Module, Any], torch.Tensor]


def lm_loss(model: nn.Module, batch) -> torch.Tensor:
    """Next-token cross-entropy of a `TokenBatch`, averaged over every position."""
    return model(batch.inputs, batch.targets)[1]


def clip_gradients(model: nn.Module, max_norm: float) -> None:
    parameters = list(model.parameters())
    torch.nn.utils.clip_grad_norm_(parameters, max_norm, foreach=multi_tensor(parameters))


@dataclass
class TrainResult:
    final_loss: float
    train_seconds: float
    tokens_seen: int
    ms_per_step: float | None = None  # median wall time of one optimizer step (data, forward, backward, update)
    resumed_from: int | None = None  # the checkpoint step this run continued from
    val_history: list[tuple[int, float]] = field(default_factory=list)
    precision: str = "fp32"


@dataclass
class TrainingState:
    """Where training stands, besides the weights and optimizer: what a checkpoint carries over."""

    step: int = 0
    running_loss: float | None = None  # smoothed for reporting; the raw per-step loss is noisy at small batches
    tokens_seen: int = 0
    seconds_before: float = 0.0  # training time of the runs before a resume
    ms_before: float | None = None  # their ms_per_step, until this run has timed steps of its own
    val_history: list[tuple[int, float]] = field(default_factory=list)
    step_ms: list[float] = field(default_factory=list)  # this run's step times

    @classmethod
    def from_state(cls, state: dict) -> "TrainingState":
        return cls(step=int(state["step"]), running_loss=state["running_loss"], tokens_seen=int(state["tokens_seen"]),
                   seconds_before=float(state["train_seconds"]), ms_before=state["ms_per_step"],
                   val_history=[(int(step), float(loss)) for step, loss in state["val_history"]])

    def record(self, loss: float, tokens: int, ms: float) -> None:
        self.step += 1
        self.tokens_seen += tokens
        self.step_ms.append(ms)
        self.running_loss = loss if self.running_loss is None else 0.9 * self.running_loss + 0.1 * loss

    @property
    def ms_per_step(self) -> float | None:
        return median_step_ms(self.step_ms, self.ms_before)


def median_step_ms(step_ms: list[float], fallback: float | None = None) -> float | None:
    """The median step time without the warm-up: the first TIMING_WARMUP_STEPS steps when there are more
    than twice as many, else the first half. `fallback` when no step was timed."""
    if not step_ms:
        return fallback
    warm = step_ms[TIMING_WARMUP_STEPS:] if len(step_ms) > 2 * TIMING_WARMUP_STEPS else step_ms[len(step_ms) // 2 :]
    return statistics.median(warm)


def train(model: nn.Module, batches: BatchSource, cfg: TrainConfig, callback=None, *, loss: LossFunction = lm_loss,
          precision: Precision | None = None, validate: Callable[[], float] | None = None,
          checkpoints: CheckpointStore | None = None, checkpoint_every: int | None = None,
          resume: bool = True, world: World | None = None) -> TrainResult:
    """Train `model` (already on its device) for `cfg.steps` steps of `cfg.batch_size` sequences from
    `batches`, each step in `cfg.grad_accum` micro-batches.

    callback: `on_step` every `cfg.log_every` steps and at the last; `on_validation` and `on_checkpoint`
    when it has them. validate: returns a held-out loss; called every `cfg.eval_every` steps and at the end.
    checkpoints: where to save every `checkpoint_every` steps and at the end; with `resume`, an existing
    checkpoint there is loaded first and training continues from its step, on the same loss curve. A
    one-worker checkpoint that cannot be used is set aside (`CheckpointStore.resume_state`), the callback's
    `on_checkpoint_set_aside` says so, and training starts from scratch.

    world: the process group this rank trains in (default: torch.distributed's, if initialized). With more
    than one rank, `model` is the wrapped model (`distributed.parallelize`), `batches` gives this rank's
    rows of each global batch (batch_size / world size per step), the loss is averaged over the ranks,
    checkpoints are sharded (`sharded_checkpoint`), and `validate` is called on every rank (it may be
    collective). The callback is called on rank 0 only, unless it sets `all_ranks = True` (a reporter
    that must be called the same number of times on every rank): every rank then sees the same calls with
    the same, global values.
    """
    world = world or World.current()
    run = _Run(model, batches, loss, cfg, precision, world)
    if checkpoints is not None and resume:
        set_aside = run.restore(checkpoints)
        if set_aside:  # an unusable checkpoint was renamed aside: this run starts from scratch
            notify(callback, "on_checkpoint_set_aside", set_aside)
    resumed_from = run.progress.step or None
    sink = callback if world.is_main or getattr(callback, "all_ranks", False) else None
    started = time.perf_counter()
    model.train()
    while run.progress.step < cfg.steps:
        step_started = time.perf_counter()
        loss_value, lr, tokens = run.optimisation_step()
        run.progress.record(loss_value, tokens, 1000 * (time.perf_counter() - step_started))
        done = run.progress.step
        if sink is not None and (done % cfg.log_every == 0 or done == cfg.steps):
            sink.on_step(done, run.progress.running_loss, lr)
        if validate is not None and cfg.eval_every and (done % cfg.eval_every == 0 or done == cfg.steps):
            run.validate(validate, sink)
        if checkpoints is not None and ((checkpoint_every and done % checkpoint_every == 0) or done == cfg.steps):
            notify(sink, "on_checkpoint", done, run.save(checkpoints, time.perf_counter() - started))
    progress = run.progress
    # cfg.steps >= 1: a step was recorded in this run, or the resumed checkpoint's state holds its running loss
    assert progress.running_loss is not None, "a run ends after at least one recorded step"
    return TrainResult(
        final_loss=progress.running_loss, train_seconds=progress.seconds_before + time.perf_counter() - started,
        tokens_seen=progress.tokens_seen, ms_per_step=progress.ms_per_step, resumed_from=resumed_from,
        val_history=progress.val_history, precision=run.precision.name,
    )


class _Run:
    """The state of one `train` call: model, optimizer, loss scaler, batch source and progress."""

    def __init__(self, model: nn.Module, batches: BatchSource, loss: LossFunction, cfg: TrainConfig,
                 precision: Precision | None, world: World):
        self.model, self.batches, self.loss, self.cfg, self.world = model, batches, loss, cfg, world
        self.device = next(model.parameters()).device
        self.precision = precision or resolve_precision(cfg.precision, self.device)
        self.optimizer = make_optimizer(model, cfg)
        self.scaler = self.precision.grad_scaler()
        self.progress = TrainingState()
        if cfg.batch_size % (world.size * cfg.grad_accum):
            raise ValueError(f"train.batch_size {cfg.batch_size} does not split into {world.size} worker(s) x "
                             f"grad_accum {cfg.grad_accum} equal micro-batches")
        self.micro_batch = cfg.batch_size // (world.size * cfg.grad_accum)

    def optimisation_step(self) -> tuple[float, float, int]:
        """One optimizer step over `grad_accum` micro-batches on every rank: (the loss averaged over the
        step's global batch, learning rate, tokens read by all ranks)."""
        cfg, step = self.cfg, self.progress.step
        lr = cosine_lr(step, cfg)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        totals = torch.zeros(2, device=self.device, dtype=torch.float64)  # loss sum, tokens
        for index in range(cfg.grad_accum):
            batch = self.batches.batch(self.micro_batch).to(self.device)
            totals[1] += batch.num_tokens
            with gradient_sync(self.model, index == cfg.grad_accum - 1):
                with self.precision.autocast():
                    loss = self.loss(self.model, batch)
                totals[0] += loss.detach().double()
                self.scaler.scale(loss / cfg.grad_accum).backward()
        loss_sum, tokens = self.world.sum(totals).tolist()  # one device sync (and one all-reduce) per step
        loss_value = loss_sum / (cfg.grad_accum * self.world.size)
        if not math.isfinite(loss_value):
            raise NonFiniteLossError(f"training loss became {loss_value} at step {step + 1} (lr {lr:.3g}, precision "
                                     f"{self.precision.name}); the trial was stopped before the update")
        self.scaler.unscale_(self.optimizer)
        clip_gradients(self.model, cfg.grad_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # so that the step's wall time is its own
        return loss_value, lr, int(tokens)

    def validate(self, validate: Callable[[], float], callback) -> None:
        val_loss = validate()
        self.model.train()
        self.progress.val_history.append((self.progress.step, val_loss))
        notify(callback, "on_validation", self.progress.step, val_loss)

    def progress_state(self, seconds: float) -> dict:
        """Where training stands besides the weights; `seconds`: this run's training time so far."""
        progress = self.progress
        return {
            "step": progress.step, "scaler": self.scaler.state_dict(), "running_loss": progress.running_loss,
            "tokens_seen": progress.tokens_seen, "train_seconds": progress.seconds_before + seconds,
            "ms_per_step": progress.ms_per_step, "val_history": [list(v) for v in progress.val_history],
        }

    def checkpoint_state(self, seconds: float) -> dict:
        """Everything the next step depends on, in one dictionary (a one-worker checkpoint)."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "rng": self._rng_state(),
                **self.progress_state(seconds)}

    def save(self, checkpoints: CheckpointStore, seconds: float) -> Path:
        """One file on one worker; a sharded checkpoint, written by every rank, on several. Each format
        replaces the other, so the folder holds one latest checkpoint."""
        sharded = checkpoints.sharded
        if not self.world.distributed:
            path = checkpoints.save(self.checkpoint_state(seconds))
            sharded.remove()
            return path
        folder = sharded.save(self.progress.step, self.model, self.optimizer, self.progress_state(seconds),
                              self._rng_state(), self.world)
        if self.world.is_main:
            checkpoints.path.unlink(missing_ok=True)
        return folder

    def restore(self, checkpoints: CheckpointStore) -> str | None:
        """Continue from the checkpoint in `checkpoints`, whichever number of workers wrote it: a sharded one
        is resharded for this world by DCP; a one-worker file is read whole by every rank. Returns the note of
        a one-worker checkpoint that could not be used and was set aside (training then starts from scratch)."""
        sharded = checkpoints.sharded
        state: dict | None
        if sharded.exists() and (self.world.distributed or not checkpoints.exists()):
            state, rng = sharded.load(self.model, self.optimizer, self.world)
        elif checkpoints.exists() and self.world.distributed:
            state = checkpoints.load(self.device)  # every rank reads it: an unusable one stops the trial
            rng = state["rng"]
            load_full_state(self.model, self.optimizer, state)
        elif checkpoints.exists():
            state, set_aside = checkpoints.resume_state(self.device)
            if state is None:
                return set_aside
            rng = state["rng"]
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        else:
            return None
        self.scaler.load_state_dict(state["scaler"])
        self._set_rng_state(rng)
        self.progress = TrainingState.from_state(state)
        return None

    def _rng_state(self) -> dict:
        state = {"torch": torch.get_rng_state(), "batches": self.batches.state_dict()}
        if torch.cuda.is_available():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def _set_rng_state(self, rng: dict) -> None:
        torch.set_rng_state(rng["torch"].cpu())
        if "cuda" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state_all([s.cpu() for s in rng["cuda"]][: torch.cuda.device_count()])
        self.batches.load_state_dict(rng["batches"])

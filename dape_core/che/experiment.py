"""Train and evaluate one model on one CHE task (docs/method.md §7) or on associative recall (docs/method.md §8,
extension).

    from dape_core.che.experiment import CheConfig, run_che
    result = run_che(CheConfig(task="parity_check", steps=300), ModelConfig(preset="tiny"))
    result.acc_train, result.acc_test, result.accuracy  # accuracy: {test length: accuracy}

Protocol (Delétang et al. 2023, Ruoss et al. 2023, as DAPE uses it):
- `form="encoder"` (every CHE task): a bidirectional model (`ModelConfig.causal=False`: symmetric |i − j|
  biases, no mask, no `tril`) reads the n input tokens followed by |y| placeholders; the logits at the
  placeholders are the answer. One shared output head: the model's vocabulary is
  max(input vocabulary + 1, output classes) and the answer is read from the first `output_classes` logits
  (class c is the c-th output unit), so the architecture and its analytic parameter count are the LM's.
- `form="causal"` (associative recall only, this project's extension): a causal LM over the stream
  `k1 v1 ... kP vP q1 a1 ... qQ aQ`, trained and scored only at the query positions, where the next token is
  the queried value (the multi-query recall of Arora et al. 2023). DAPE V2's Proposition 1 is about a causal
  model, and it keeps NoPE meaningful: a bidirectional NoPE model has no way to tell token order at all.
- Each training batch is of one length drawn from U{min, ..., train_max_length} (min = 1 for the CHE tasks,
  the task's minimum for recall); with `train.grad_accum` > 1, each micro-batch draws its own.
- Accuracy is per-token argmax accuracy over the positions that count (target_mask, or the recall queries),
  pooled over `eval_batches` batches of each length. `acc_train` averages it over every training length,
  `acc_test` over `test_lengths` (the paper: 41..500; the CPU default is a small subset).

Training is the LM's loop (`dape_core.train.train`, with this module's batch source and loss), so a CHE run
checkpoints, resumes and validates like an LM run. Optimizer, schedule, clipping, precision, device and seed
come from a `TrainConfig` (the experiment's `train:` section); `steps`, `batch_size` and `lr` from CheConfig
replace its own.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.nn import functional as F

from ..config import ModelConfig
from ..model import build_model
from ..train import CheckpointStore, TrainConfig, resolve_device, resolve_precision, train
from .config import CheConfig
from .tasks import make_encoder_batch


@dataclass
class CheResult:
    task: str
    form: str
    acc_train: float  # mean over every training length
    acc_test: float  # mean over test_lengths
    accuracy: dict[int, float]  # per test length
    train_accuracy: dict[int, float]  # per training length
    final_train_loss: float
    train_seconds: float
    eval_seconds: float
    num_parameters: int
    ms_per_step: float | None
    tokens_seen: int
    device: str = "cpu"
    precision: str = "fp32"
    resumed_from: int | None = None  # the checkpoint step this run continued from
    val_history: list[tuple[int, float]] = field(default_factory=list)


@dataclass
class _Scored:
    """One batch as tensors: tokens [B, T], targets and mask at the scored positions, and where they are."""

    tokens: torch.Tensor
    targets: torch.Tensor
    mask: torch.Tensor
    positions: torch.Tensor | None  # encoder: the placeholder columns; causal: None (mask covers [B, T])

    @property
    def num_tokens(self) -> int:
        return self.tokens.numel()

    def to(self, device) -> "_Scored":
        def moved(tensor: torch.Tensor) -> torch.Tensor:
            return tensor.to(device, non_blocking=True)

        return _Scored(moved(self.tokens), moved(self.targets), moved(self.mask),
                       None if self.positions is None else moved(self.positions))


def _tensor(array: np.ndarray) -> torch.Tensor:
    # A copy: some labels are reversed views, whose negative strides torch rejects (numpy calls a reversed
    # [B, 1] view contiguous, so np.ascontiguousarray would keep it).
    return torch.from_numpy(array.copy(order="C"))


def _sample(cfg: CheConfig, rng: np.random.Generator, length: int, batch_size: int) -> _Scored:
    task = cfg.task_object
    if cfg.form == "causal":
        batch = task.sample_causal(rng, length, batch_size)
        return _Scored(_tensor(batch.tokens), _tensor(batch.targets), _tensor(batch.loss_mask), None)
    batch = make_encoder_batch(task, rng, length, batch_size)
    return _Scored(_tensor(batch.tokens), _tensor(batch.targets), _tensor(batch.target_mask),
                   _tensor(batch.output_positions))


class TaskBatches:
    """The trainer's batch source for a CHE task: each batch is one length drawn from
    U{min_length..train_max_length}, then strings of that length. Seeded; its state is the numpy generator's."""

    def __init__(self, cfg: CheConfig, seed: int):
        self.cfg = cfg
        self.rng = np.random.default_rng(seed)

    def batch(self, batch_size: int) -> _Scored:
        length = int(self.rng.integers(self.cfg.min_length, self.cfg.train_max_length + 1))
        return _sample(self.cfg, self.rng, length, batch_size)

    def state_dict(self) -> dict:
        return {"numpy": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["numpy"]


def _scored_logits(model, cfg: CheConfig, batch: _Scored) -> torch.Tensor:
    """Logits at the scored positions: [B, out_len, classes] (encoder) or [B, T, vocab] (causal)."""
    logits = model(batch.tokens)
    if batch.positions is None:
        return logits
    return logits[:, batch.positions, : cfg.task_object.output_classes]


def task_loss(cfg: CheConfig):
    """The trainer's loss for this task: cross-entropy over the scored positions only."""

    def loss(model, batch: _Scored) -> torch.Tensor:
        losses = F.cross_entropy(_scored_logits(model, cfg, batch).float().flatten(0, 1), batch.targets.flatten(),
                                 reduction="none")
        mask = batch.mask.flatten().to(losses.dtype)
        return (losses * mask).sum() / mask.sum().clamp(min=1)

    return loss


@torch.no_grad()
def accuracy_at(model, cfg: CheConfig, length: int, rng: np.random.Generator, device, precision,
                score: bool = True) -> float | None:
    """Per-token argmax accuracy over the scored positions of `eval_batches` batches of one length. With
    `score` False the batches are drawn (the generator moves on exactly as when scoring) but not scored: None."""
    model.eval()
    correct = total = 0
    for _ in range(cfg.eval_batches):
        batch = _sample(cfg, rng, length, cfg.eval_batch_size)
        if not score:
            continue
        batch = batch.to(device)
        with precision.autocast():
            logits = _scored_logits(model, cfg, batch)
        hits = (logits.argmax(-1) == batch.targets) & batch.mask
        correct += int(hits.sum())
        total += int(batch.mask.sum())
    if not score:
        return None
    return correct / total if total else float("nan")


EVAL_SEED_OFFSET = 1_000_003  # the evaluation strings' generator: train.seed + this, independent of training


def accuracies(model, cfg: CheConfig, seed: int, device, precision,
               only: set[int] | None = None) -> tuple[dict[int, float], dict[int, float]]:
    """(accuracy per training length, per test length) as a trial scores them: one generator, the training
    lengths then `test_lengths` in order. `only`: score just these test lengths (and no training length); the
    others' strings are still drawn, so a length scores the same strings as in the trial of these test_lengths."""
    rng = np.random.default_rng(seed + EVAL_SEED_OFFSET)
    train = {n: accuracy_at(model, cfg, n, rng, device, precision, only is None) for n in cfg.train_lengths}
    test = {n: accuracy_at(model, cfg, n, rng, device, precision, only is None or n in only)
            for n in cfg.test_lengths}
    if only is not None:
        return {}, _scored(test)
    return _scored(train), _scored(test)


def _scored(accuracy: dict[int, float | None]) -> dict[int, float]:
    """The lengths that were scored: `accuracy_at` gives None for a length whose strings were only drawn."""
    return {n: value for n, value in accuracy.items() if value is not None}


def _validation(model, cfg: CheConfig, seed: int, device, precision):
    """`train.eval_every`'s held-out loss: the task loss on `eval_batches` fixed batches of training lengths,
    drawn once from their own seed (so the same strings at every validation)."""
    source = TaskBatches(cfg, seed)
    batches = [source.batch(cfg.eval_batch_size).to(device) for _ in range(cfg.eval_batches)]
    loss = task_loss(cfg)

    @torch.no_grad()
    def validate() -> float:
        model.eval()
        with precision.autocast():
            return float(np.mean([loss(model, batch).item() for batch in batches]))

    return validate


def run_che(cfg: CheConfig, model_cfg: ModelConfig | None = None, train_cfg: TrainConfig | None = None,
            callback=None, *, checkpoints: CheckpointStore | None = None, checkpoint_every: int | None = None,
            resume: bool = True, on_trained=None) -> CheResult:
    """Train on lengths U{min..train_max_length} with `dape_core.train.train` (checkpoints, resume and
    validation as for the LM), then score every training length and every test length. `on_trained(model)`:
    called with the trained model before it is scored (the caller keeps its weights)."""
    train_cfg = cfg.training_config(train_cfg or TrainConfig())
    device = resolve_device(train_cfg.device)
    precision = resolve_precision(train_cfg.precision, device)
    torch.manual_seed(train_cfg.seed)
    model = build_model(cfg.model_config(model_cfg or ModelConfig()), seed=train_cfg.seed).to(device)
    validate = _validation(model, cfg, train_cfg.seed + 2_000_003, device, precision) if train_cfg.eval_every else None
    trained = train(model, TaskBatches(cfg, train_cfg.seed), train_cfg, callback, loss=task_loss(cfg),
                    precision=precision, validate=validate, checkpoints=checkpoints,
                    checkpoint_every=checkpoint_every, resume=resume)

    if on_trained is not None:
        on_trained(model)
    started = time.perf_counter()
    train_accuracy, accuracy = accuracies(model, cfg, train_cfg.seed, device, precision)
    return CheResult(
        task=cfg.task, form=cfg.form,
        acc_train=float(np.mean(list(train_accuracy.values()))), acc_test=float(np.mean(list(accuracy.values()))),
        accuracy=accuracy, train_accuracy=train_accuracy, final_train_loss=float(trained.final_loss),
        train_seconds=trained.train_seconds, eval_seconds=time.perf_counter() - started,
        num_parameters=model.num_parameters(), ms_per_step=trained.ms_per_step, tokens_seen=trained.tokens_seen,
        device=str(device), precision=precision.name, resumed_from=trained.resumed_from,
        val_history=trained.val_history,
    )

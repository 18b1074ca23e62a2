"""One experiment = data + model + training + evaluation, returned as one structured result.

This is the unit a study trial runs. It is independent of any orchestrator: progress goes to a callback.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import torch
from pydantic import ConfigDict, Field, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from .config import ModelConfig
from .data import DataConfig, TrainStream, evaluation_windows, load_corpus
from .evaluate import EvalConfig, perplexity_by_length
from .model import build_model
from .train import TrainConfig, TrainerCallback, train


@pydantic_dataclass(config=ConfigDict(extra="forbid"))
class ExperimentConfig:
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    eval: EvalConfig = Field(default_factory=lambda: EvalConfig(lengths=[64, 128, 256, 512]))

    @model_validator(mode="after")
    def _eval_beyond_training(self) -> "ExperimentConfig":
        shorter = [length for length in self.eval.lengths if length < self.train.seq_len]
        if shorter:
            raise ValueError(
                f"eval.lengths {shorter} are below the training length train.seq_len={self.train.seq_len}: "
                "the protocol evaluates at the training length and beyond (SPEC §6)"
            )
        if self.eval.tail_tokens > self.train.seq_len:
            raise ValueError(
                f"eval.tail_tokens={self.eval.tail_tokens} exceeds train.seq_len={self.train.seq_len}: "
                "the scored tail must fit in the shortest window"
            )
        return self

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class ExperimentResult:
    perplexity: dict[int, float]
    final_train_loss: float
    train_seconds: float
    eval_seconds: float
    tokens_seen: int
    num_parameters: int
    data_hash: str
    extra: dict = field(default_factory=dict)


def run_experiment(cfg: ExperimentConfig, callback: TrainerCallback | None = None, threads: int | None = None) -> ExperimentResult:
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(cfg.train.seed)
    corpus = load_corpus(cfg.data)
    if cfg.model.vocab_size < corpus.vocab_size:
        raise ValueError(f"model.vocab_size={cfg.model.vocab_size} is smaller than the corpus vocabulary {corpus.vocab_size}")
    model = build_model(cfg.model)
    stream = TrainStream(corpus.train, seed=cfg.train.seed)
    trained = train(model, stream, cfg.train, callback)
    started = time.perf_counter()
    windows = evaluation_windows(corpus.validation, cfg.eval.lengths, cfg.eval.n_windows, cfg.eval.seed)
    perplexity = perplexity_by_length(model, windows, cfg.eval)
    return ExperimentResult(
        perplexity=perplexity,
        final_train_loss=trained.final_loss,
        train_seconds=trained.train_seconds,
        eval_seconds=time.perf_counter() - started,
        tokens_seen=trained.tokens_seen,
        num_parameters=model.num_parameters(),
        data_hash=corpus.content_hash,
    )

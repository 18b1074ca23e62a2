"""The config of one experiment (`ExperimentConfig`): its sections validated together, its effective fields and
its fingerprint. It loads without torch (the config sections only), so that a study file is validated at once;
`dape_core.experiment` runs it, `dape_core.stored` reads it back from a stored model's folder.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from .che.config import CheConfig
from .config import ModelConfig, effective_model_fields
from .data.config import DataConfig
from .evaluate.config import EvalConfig
from .train.config import TrainConfig
from .train.distributed_config import DistributedConfig

# Train fields that change what is logged, not the trajectory: a checkpoint survives changing them.
_NOT_IN_FINGERPRINT = ("log_every", "eval_every", "val_tokens")


@pydantic_dataclass(config=ConfigDict(extra="forbid"))
class ExperimentConfig:
    """One trial: the model, its data, its training and its evaluation, validated together.

    The config is the effective one: what `to_dict()` says is what the model and the trainer use. The model
    fields that follow from the rest are filled in here, not at run time (`effective_model_fields`):
    `model.train_length` is `train.seq_len`, randomized RoPE's `rope_random_max` defaults to the largest
    evaluation length and FIRE's `fire_l0` to the training length.

    che: a CHE / associative-recall experiment instead of the LM one: `data` and `eval` are then ignored,
    `train.steps`, `train.batch_size`, `train.lr` and `train.seq_len` are set from it (so that the
    orchestrator's progress, checkpoints and estimates see the run that happens), and the model is shaped
    for the task (`CheConfig.model_fields`).

    distributed: how many processes train the run and how (DDP or FSDP; `DistributedConfig`). It is how
    the run is computed, not what is computed: the global batch, the data order and the result do not
    depend on it (up to the order of floating-point sums), so it is not part of the `fingerprint` and a
    checkpoint resumes on another number of workers.
    """

    # `model` comes last: its effective fields are derived from the sections validated before it (pydantic
    # validates fields in order). `to_dict` puts it first again.
    data: DataConfig = Field(default_factory=DataConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    eval: EvalConfig = Field(default_factory=lambda: EvalConfig(lengths=[64, 128, 256, 512]))
    che: CheConfig | None = None
    distributed: DistributedConfig = Field(default_factory=DistributedConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)

    @field_validator("model", mode="before")
    @classmethod
    def _effective_model(cls, model, info: ValidationInfo):
        """Fill in the fields that follow from the other sections before the model section is validated, so
        that its own checks (rope_random_max against the training length) see the values that will be used.
        Where a section it depends on is itself invalid, that section's error is reported instead."""
        fields = asdict(model) if isinstance(model, ModelConfig) else model
        if not isinstance(fields, dict) or "che" not in info.data:
            return model
        che = info.data["che"]
        if che is not None:
            return che.model_fields(fields)
        if "train" not in info.data or "eval" not in info.data:
            return model
        seq_len = info.data["train"].seq_len
        return effective_model_fields(fields, seq_len, max(seq_len, *info.data["eval"].lengths))

    @model_validator(mode="after")
    def _consistent(self) -> "ExperimentConfig":
        self._check_distributed()
        if self.che is not None:
            self.train = self.che.training_config(self.train)
            return self  # the LM's data/eval checks do not apply
        shorter = [length for length in self.eval.lengths if length < self.train.seq_len]
        if shorter:
            raise ValueError(
                f"eval.lengths {shorter} are below the training length train.seq_len={self.train.seq_len}: "
                "the protocol evaluates at the training length and beyond (docs/method.md §6)"
            )
        if self.eval.tail_tokens > self.train.seq_len:
            raise ValueError(
                f"eval.tail_tokens={self.eval.tail_tokens} exceeds train.seq_len={self.train.seq_len}: "
                "the scored tail must fit in the shortest window"
            )
        if self.eval.split == "test" and self.data.test_fraction == 0:
            raise ValueError("eval.split is 'test' but data.test_fraction is 0: hold out a test split "
                             "(e.g. data.test_fraction: 0.05) or evaluate on 'validation'")
        if self.data.source == "tokens" and self.data.chunk_tokens <= max(self.eval.lengths):
            raise ValueError(f"data.chunk_tokens={self.data.chunk_tokens} must exceed the longest evaluation length "
                             f"{max(self.eval.lengths)}: a longer window would join held-out chunks that are not "
                             "contiguous text")
        vocabulary = self.data.known_vocabulary
        if vocabulary is not None and self.model.vocab_size < vocabulary:
            raise ValueError(f"model.vocab_size={self.model.vocab_size} is below the data's vocabulary of {vocabulary} "
                             f"({_vocabulary_source(self.data)}): set model.vocab_size to at least {vocabulary}")
        return self

    def _check_distributed(self) -> None:
        workers, train = self.distributed.workers, self.train
        if workers == 1:
            return
        if self.che is not None:
            raise ValueError(f"distributed.workers={workers}: CHE and associative-recall trials train on one worker "
                             "(their models are small); set distributed.workers to 1")
        if train.batch_size % (workers * train.grad_accum):
            raise ValueError(f"train.batch_size={train.batch_size} does not split into distributed.workers={workers} "
                             f"x train.grad_accum={train.grad_accum} equal micro-batches: each step's global batch "
                             "is shared equally by the workers")
        if self.distributed.parallelism == "fsdp" and train.precision == "fp16":
            raise ValueError("train.precision fp16 is not supported with distributed.parallelism fsdp: use bf16 (GPUs "
                             "that have it), fp32, or parallelism ddp")

    def to_dict(self) -> dict:
        sections = asdict(self)
        sections["model"] = self.model.to_dict()  # `options` only where a component declares some
        return {name: sections[name] for name in ("model", "data", "train", "eval", "che", "distributed")}

    def fingerprint(self) -> str:
        """Identity of a training trajectory: model, data and train sections, less logging-only fields (and
        not the `distributed` section: the same trajectory on any number of workers)."""
        sections = {"model": self.model.to_dict(), "data": asdict(self.data),
                    "train": {k: v for k, v in asdict(self.train).items() if k not in _NOT_IN_FINGERPRINT}}
        if self.che is not None:
            sections["che"] = asdict(self.che)
        return hashlib.sha256(json.dumps(sections, sort_keys=True).encode()).hexdigest()[:16]


def _vocabulary_source(data: DataConfig) -> str:
    return "data.vocab_size" if data.source == "tokens" and data.vocab_size is not None else "the byte tokenizer"

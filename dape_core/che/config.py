"""The `che:` section of an experiment: which CHE task (or associative recall), its lengths and its training
run. Importable without torch (the study format validates it); the run itself is in `experiment.py`."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, field
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from ..config import ModelConfig, effective_model_fields
from ..train.config import TrainConfig
from ..types import PositiveFloat, PositiveInt
from .recall import RECALL_TASKS
from .tasks import TASKS

TASK_NAMES = (*TASKS, *RECALL_TASKS)


# A Literal built from the task tables, so that the schema lists every task.
TaskName = Literal[TASK_NAMES]  # type: ignore[valid-type]


def _length_range(value):
    """"A..B" is the inclusive range A, A+1, ..., B (the paper's test lengths are "41..500")."""
    if isinstance(value, str):
        first, sep, last = value.partition("..")
        if not sep or not first.strip().isdigit() or not last.strip().isdigit() or int(first) > int(last):
            raise ValueError(f"expected a list of lengths or an inclusive range 'A..B' with A <= B (got {value!r})")
        return list(range(int(first), int(last) + 1))
    return value


TestLengths = Annotated[list[PositiveInt], Field(min_length=1),
                        BeforeValidator(_length_range, json_schema_input_type=list[PositiveInt] | str),
                        AfterValidator(lambda lengths: sorted(set(lengths)))]


@pydantic_dataclass(config=ConfigDict(extra="forbid"))
class CheConfig:
    """task: one of the 15 CHE tasks or `associative_recall`. form: `encoder` (CHE protocol) or `causal`
    (associative recall only). train_max_length: training lengths are U{1..train_max_length}.
    test_lengths: lengths scored for `acc_test`, a list or an inclusive range "A..B" (the paper: "41..500").
    steps, batch_size, lr: the training run (replacing those of the `train:` section). eval_batches x
    eval_batch_size strings are scored per length; with `train.eval_every`, the validation loss is the loss
    on eval_batches fixed batches of training lengths."""

    task: TaskName = "parity_check"
    form: Literal["encoder", "causal"] = "encoder"
    train_max_length: PositiveInt = 40
    test_lengths: TestLengths = field(default_factory=lambda: [41, 60, 100])  # or "41..500" (inclusive)
    steps: PositiveInt = 1000
    batch_size: PositiveInt = 128
    lr: PositiveFloat = 1e-3
    eval_batches: PositiveInt = 2
    eval_batch_size: PositiveInt = 128

    @model_validator(mode="after")
    def _consistent(self) -> "CheConfig":
        task = self.task_object
        if self.form == "causal" and self.task not in RECALL_TASKS:
            raise ValueError(f"form 'causal' is only for associative_recall; CHE task {self.task!r} uses 'encoder'")
        if self.train_max_length < self.min_length:
            raise ValueError(f"train_max_length={self.train_max_length} is below the task's minimum length "
                             f"{self.min_length} ({self.task}, form {self.form})")
        too_short = [n for n in self.test_lengths if n < self.min_length]
        if too_short:
            raise ValueError(f"test_lengths {too_short} are below the task's minimum length {self.min_length}")
        if self.task in RECALL_TASKS:  # distinct keys must fit in the key vocabulary
            longest = max(self.test_lengths + [self.train_max_length])
            pairs = task.causal_counts(longest)[0] if self.form == "causal" else task.counts(longest)[0]
            if pairs > task.num_keys:
                raise ValueError(f"test_lengths up to {longest} need {pairs} distinct keys; "
                                 f"associative_recall has {task.num_keys}")
        return self

    @property
    def task_object(self):
        return RECALL_TASKS[self.task] if self.task in RECALL_TASKS else TASKS[self.task]

    @property
    def min_length(self) -> int:
        task = self.task_object
        return task.min_causal_length if self.form == "causal" else task.min_length

    @property
    def train_lengths(self) -> list[int]:
        return list(range(self.min_length, self.train_max_length + 1))

    def sequence_length(self, n: int) -> int:
        """Tokens the model reads for a string of requested length n (inputs plus placeholders)."""
        if self.form == "causal":
            return n
        task = self.task_object
        m = task.input_length(n)
        return m + task.output_length(m)

    def model_fields(self, fields: dict) -> dict:
        """`model:` fields shaped for this task: vocabulary, causality, training length, and the lengths that
        depend on it (see `effective_model_fields`)."""
        task = self.task_object
        shaped = {**fields, "vocab_size": max(task.model_vocab_size, task.output_classes),
                  "causal": self.form == "causal"}
        return effective_model_fields(shaped, self.longest_training_sequence, self.longest_sequence)

    def model_config(self, model: ModelConfig) -> ModelConfig:
        """The experiment's model, shaped for this task (`model_fields`)."""
        return ModelConfig(**self.model_fields(asdict(model)))

    @property
    def longest_training_sequence(self) -> int:
        return max(self.sequence_length(n) for n in self.train_lengths)

    @property
    def longest_sequence(self) -> int:
        """The longest sequence the model reads, in training or in testing."""
        return max(self.sequence_length(n) for n in [*self.train_lengths, *self.test_lengths])

    def training_config(self, train: TrainConfig) -> TrainConfig:
        """The `train:` section with this run's steps, batch size, lr, and its longest sequence as seq_len."""
        return dataclasses.replace(train, steps=self.steps, batch_size=self.batch_size, lr=self.lr,
                                   seq_len=self.longest_training_sequence)

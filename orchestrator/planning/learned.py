"""Duration estimates learned from the store: the measured ms per training step of finished runs of the same
shape, which replaces the analytic estimate (estimate.py) wherever such runs exist.

A run matches a trial when they share what sets the cost of a step: the model's shape (layers, width, heads,
MLP ratio, vocabulary, position encoding, causality), its score processor (and, with one, the processor
settings that change a step's cost, `PROCESSOR_KEYS`: its kernel, D_dape and form), the components' options
(`model.options.*`), the sequence length, batch, precision and accumulation, a CHE trial's task and batch, the device
kind (cpu, cuda) and the trial size (workers; with several, their parallelism). Learning rate, steps and seeds
do not matter, so runs of any experiment in the store teach every study that trains the same shape. The CPU
threads per trial are not logged and not matched.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import dape_core.metric_names as names
from dape_core.components import processors

if TYPE_CHECKING:
    from ..tracking.readers import ClientReader, SQLiteReader

SHAPE_KEYS = ("model.n_layer", "model.d_model", "model.n_head", "model.mlp_ratio", "model.vocab_size",
              "model.pos_encoding", "model.processor", "model.causal", "model.attention_block_size",
              "train.seq_len", "train.batch_size", "train.precision", "train.grad_accum")
# The processor fields whose value changes a step's cost, for any processor's run (its records' settings with
# `step_cost`; a field a processor does not read is logged n/a, so the key is the same for every processor).
PROCESSOR_KEYS = tuple(sorted({f"model.{setting.name}" for record in processors.values()
                              for setting in record.declared if setting.field and setting.step_cost}))
OPTIONS_PREFIX = "model.options."
CHE_KEYS = ("che.task", "che.form", "che.batch_size", "che.train_max_length")


def device_kind(device: str) -> str:
    """"cuda:0" -> "cuda"; "cpu" -> "cpu"."""
    return (device or "cpu").split(":")[0]


# What train.precision "auto" resolves to by device kind (dape_core.train.precision.resolve_precision; on a
# GPU, bf16 where supported, which every GPU since Ampere is). Runs log the precision they resolved, plans
# hold the request: both sides are compared resolved.
AUTO_PRECISION = {"cpu": "fp32", "cuda": "bf16"}
ABSENT = (None, "None", "n/a")  # a setting the trial does not have, or does not read (tracking/params.py)


def shape_key(flat: dict[str, Any], device: str) -> tuple:
    """What a trial's step cost depends on, from its flattened config (values compared as MLflow's text):
    a run's logged params, or a planned trial's params as they will be logged (tracking.params)."""
    kind = device_kind(device)
    keys = list(SHAPE_KEYS)
    processor = processors.get(str(flat.get("model.processor", "none")))
    if processor is None or processor.present:  # a processor (one not registered here: a plugin's run)
        keys += PROCESSOR_KEYS
    keys += sorted(key for key in flat if key.startswith(OPTIONS_PREFIX))
    if flat.get("che.task") not in ABSENT:
        keys += CHE_KEYS
    values = {key: "None" if flat.get(key) in ABSENT else str(flat.get(key)) for key in keys}  # n/a = None here
    if values["train.precision"] == "auto":
        values["train.precision"] = AUTO_PRECISION.get(kind, "auto")
    return (kind,) + tuple(values.items()) + trial_size(flat)


def trial_size(flat: dict[str, Any]) -> tuple:
    """A step's wall time depends on the workers sharing it (and how): runs logged before trials had a size
    ran on one worker."""
    workers = str(flat.get("distributed.workers", 1))
    if workers in ("1", "None", "n/a"):
        return (("distributed.workers", "1"),)
    return (("distributed.workers", workers), ("distributed.parallelism", str(flat.get("distributed.parallelism"))))


@dataclass
class MeasuredSteps:
    """ms_per_step of finished runs, by shape key; each entry keeps its run id (to leave a run out)."""

    by_key: dict[tuple, list[tuple[str, float]]] = field(default_factory=dict)

    def add(self, key: tuple, run_id: str, ms_per_step: float) -> None:
        self.by_key.setdefault(key, []).append((run_id, ms_per_step))

    def lookup(self, key: tuple, exclude_run: str | None = None) -> tuple[float, int] | None:
        """(median ms per step, runs it comes from), or None where no other run of this shape finished."""
        values = [ms for run_id, ms in self.by_key.get(key, []) if run_id != exclude_run]
        return (statistics.median(values), len(values)) if values else None


def load_measured(store: str | SQLiteReader | ClientReader) -> MeasuredSteps:
    """Every finished trial run of every experiment in the store (its URI, or the reader of a store the command
    has open: `orchestrator run` reads through its context's) that logged ms_per_step. A SQLite store is read
    without MLflow (tracking/readers.py), so that `plan` stays quick."""
    from ..tracking.readers import reader_for
    from ..tracking.store import ROLE_TAG

    reader = reader_for(store) if isinstance(store, str) else store
    measured = MeasuredSteps()
    for experiment_id in reader.experiment_ids():
        for run in reader.runs(experiment_id, ROLE_TAG, "trial"):
            ms = run.data.metrics.get(names.MS_PER_STEP)
            if run.info.status == "FINISHED" and ms is not None and ms > 0:
                measured.add(shape_key(run.data.params, run.data.tags.get("device", "cpu")), run.info.run_id, ms)
    return measured

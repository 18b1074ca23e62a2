"""The names of the metrics an experiment produces, in one place: `ExperimentResult.metrics()` names its values
with them, and the orchestrator reads them to know, from a config alone, what a trial will log (its searcher and
scheduler checks, its claims), which series it draws and which report tables its columns make.

Per-length metrics are a prefix and a length (`ppl_512`): `per_length` builds the name, `length_of` parses it.
"""

from __future__ import annotations

import re
from typing import Iterable

# Reported while a trial trains (the orchestrator logs them step by step); `train_loss` is also a final metric.
TRAIN_LOSS, LR, VAL_LOSS = "train_loss", "lr", "val_loss"
PERIODIC = (TRAIN_LOSS, LR, VAL_LOSS)

# One number per trial, in every result (`ExperimentResult.metrics()`, in its order).
TRAIN_SECONDS, EVAL_SECONDS, TOKENS_SEEN = "train_seconds", "eval_seconds", "tokens_seen"
NUM_PARAMETERS, FLOPS_PER_TOKEN, PEAK_MEMORY_MB = "num_parameters", "flops_per_token", "peak_memory_mb"
SCALARS = (TRAIN_LOSS, TRAIN_SECONDS, EVAL_SECONDS, TOKENS_SEEN, NUM_PARAMETERS, FLOPS_PER_TOKEN, PEAK_MEMORY_MB)
MS_PER_STEP = "ms_per_step"  # where the steps were timed
WEIGHTS_SECONDS = "weights_seconds"  # where the trained model was kept
CHE_ACC_TRAIN, CHE_ACC_TEST = "che_acc_train", "che_acc_test"  # CHE: averaged over the training / test lengths
RESUMED_FROM_STEP = "resumed_from_step"  # where the training went on from a checkpoint: that checkpoint's step
# Logged by the driver with each final result (orchestrator/tracking/sharing.py): the most, and the mean number
# of, trials running at once while this one trained, the conditions of its in-training timings.
CONCURRENT_TRIALS_MAX, CONCURRENT_TRIALS_MEAN = "concurrent_trials_max", "concurrent_trials_mean"

# What the hardware did while a trial ran, sampled by the trial's process (orchestrator/execution/system_metrics.py)
# and logged under MLflow's own system-metric names (mlflow/system_metrics: "system/" + the monitor's key), so
# that its UI shows them in the run's system metrics view; step: the sample's number. The machine's CPU and
# memory, this trial process's CPU (100 = one core) and resident memory, and each of the trial's GPUs (gpu_<i>,
# i: the CUDA index the trial sees) where NVML is present, its power where the driver reports it.
SYSTEM_PREFIX = "system/"
SYSTEM_CPU_UTILIZATION = "system/cpu_utilization_percentage"
SYSTEM_MEMORY_MB = "system/system_memory_usage_megabytes"
SYSTEM_MEMORY_PERCENT = "system/system_memory_usage_percentage"
PROCESS_CPU_UTILIZATION = "system/process_cpu_utilization_percentage"
PROCESS_MEMORY_MB = "system/process_memory_usage_megabytes"
GPU_PREFIX = "system/gpu_"  # + index + "_" + one of GPU_SYSTEM_KEYS: `gpu_metric`
GPU_UTILIZATION, GPU_MEMORY_MB, GPU_MEMORY_PERCENT = ("utilization_percentage", "memory_usage_megabytes",
                                                      "memory_usage_percentage")
GPU_POWER_WATTS, GPU_POWER_PERCENT = "power_usage_watts", "power_usage_percentage"
GPU_SYSTEM_KEYS = (GPU_UTILIZATION, GPU_MEMORY_MB, GPU_MEMORY_PERCENT, GPU_POWER_WATTS, GPU_POWER_PERCENT)
# The means over a trial's samples, logged with its final result (one number each; the report's trials table):
# this process's CPU (100 = one core) and its GPUs' utilisation (averaged over its GPUs), and the samples taken.
MEAN_CPU_UTILIZATION, MEAN_GPU_UTILIZATION = "mean_process_cpu_percentage", "mean_gpu_utilization_percentage"
SYSTEM_SAMPLES = "system_samples"
SYSTEM_MEANS = (MEAN_CPU_UTILIZATION, MEAN_GPU_UTILIZATION, SYSTEM_SAMPLES)


def gpu_metric(index: int, key: str) -> str:
    """`gpu_metric(0, GPU_UTILIZATION)` -> "system/gpu_0_utilization_percentage" (MLflow's GPU monitor's name)."""
    return f"{GPU_PREFIX}{index}_{key}"


# Per-length metrics: the prefix, then the length (evaluation length, or a CHE task's test length).
PPL, DELTA_P, MS_FORWARD, ACC = "ppl_", "delta_p_", "ms_forward_", "acc_"
# Series logged from the final per-length metrics, their step being the length: name -> its metrics' prefix.
SERIES = {"ppl_by_length": PPL, "delta_p_by_length": DELTA_P, "acc_by_length": ACC}

TIMING_PREFIX = "ms_"  # a time in milliseconds: ms_per_step, ms_forward_<L>
ACCURACY_PREFIXES = ("che_acc_", ACC)
# The timings `orchestrator evaluate --time` takes of a stored model alone (one at a time, nothing else on the
# device): isolated_ms_per_step, isolated_ms_forward_<L> (+ _q1, _q3), isolated_repeats.
ISOLATED_PREFIX = "isolated_"
ISOLATED_REPEATS = f"{ISOLATED_PREFIX}repeats"  # the timed repeats each isolated median is of
QUARTILE_SUFFIXES = ("_q1", "_q3")  # an isolated timing is a median; its quartiles are <name>_q1, <name>_q3


def isolated(name: str) -> str:
    """`isolated(MS_PER_STEP)` -> "isolated_ms_per_step": the timing taken of the stored model alone."""
    return f"{ISOLATED_PREFIX}{name}"


def family(prefix: str) -> str:
    """The family a study file names a per-length metric by (an `expect:` claim's `metric`): "ppl_" -> "ppl"."""
    return prefix.removesuffix("_")


def family_prefix(name: str) -> str:
    """The per-length prefix of a family named in a study file: "ppl" -> "ppl_" (`family`'s inverse)."""
    return f"{name}_"


def per_length(prefix: str, length: int) -> str:
    """`per_length(PPL, 512)` -> "ppl_512"."""
    return f"{prefix}{length}"


def length_of(name: str, prefix: str) -> int | None:
    """The length of a per-length metric of `prefix` ("ppl_512" -> 512), None for any other name."""
    rest = name[len(prefix):] if name.startswith(prefix) else ""
    return int(rest) if rest.isdigit() else None


def per_length_pattern(prefix: str) -> re.Pattern:
    """A pattern matching the per-length metrics of `prefix`, the length its group 1."""
    return re.compile(rf"^{re.escape(prefix)}(\d+)$")


def by_length(metrics: dict[str, float], prefix: str) -> dict[int, float]:
    """The per-length metrics of `prefix` among `metrics`, by length."""
    return {length: value for name, value in metrics.items() if (length := length_of(name, prefix)) is not None}


def result_families(lengths: Iterable[int] = (), timed: bool = False,
                    che_test_lengths: Iterable[int] | None = None) -> dict[str, list[int]]:
    """The per-length metrics of a result, prefix -> lengths: perplexity and ΔP at the evaluation `lengths` (and
    the forward's time where `timed`), or a CHE result's accuracy at its test lengths."""
    if che_test_lengths is not None:
        return {ACC: list(che_test_lengths)}
    lengths = list(lengths)
    return {PPL: lengths, DELTA_P: lengths, **({MS_FORWARD: lengths} if timed else {})}


def result_scalars(che: bool = False, timed_steps: bool = True, weights: bool = False) -> list[str]:
    """The one-number metrics of a result: every result's, its ms per step where the steps were timed, the time
    keeping its model took where it was kept, a CHE result's averaged accuracies."""
    return [*SCALARS, *([MS_PER_STEP] if timed_steps else []), *([WEIGHTS_SECONDS] if weights else []),
            *([CHE_ACC_TRAIN, CHE_ACC_TEST] if che else [])]


def result_names(lengths: Iterable[int] = (), timed: bool = False, che_test_lengths: Iterable[int] | None = None,
                 timed_steps: bool = True, weights: bool = False) -> set[str]:
    """Every metric name of a result of this shape (`ExperimentResult.metrics()`'s keys)."""
    families = result_families(lengths, timed, che_test_lengths)
    return set(result_scalars(che_test_lengths is not None, timed_steps, weights)) | {
        per_length(prefix, length) for prefix, values in families.items() for length in values}

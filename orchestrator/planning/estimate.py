"""Analytic cost estimates of a trial, for `orchestrator plan`: parameters, FLOPs, memory, duration.

Parameters are counted exactly (dape_core's analytic count, tested against the built models).
FLOPs and memory are the usual transformer terms plus those of the score processor and the position encoding,
per entry of the T x T score map as their records state them (dape_core/components.py `Cost`). For DAPE: a
convolution from C_in input channels to D hidden channels and back to H, where C_in follows the form
(2H where it reads [S, B]: concat_residual and concat with a bias encoding; else H), about `3·H·D·k·T²`
extra multiply-adds per layer in the main form. Memory is per worker, for the trial's size and parallelism
(`memory_per_worker`). The duration uses an assumed sustained throughput per device kind, times the
workers (ideal scaling), and is an order-of-magnitude figure, labelled as such.
"""

from __future__ import annotations

from dataclasses import dataclass

from dape_core import ExperimentConfig, ModelConfig
from dape_core.components import Cost

# Sustained training throughput assumed for the duration estimate (FLOP/s).
CPU_FLOPS_PER_CORE = 25e9  # measured: the CPU preset trains at ~29 GFLOP/s on one core here
GPU_FLOPS = 150e12  # bf16 at ~40% of an H100/H200's dense peak


@dataclass
class TrialEstimate:
    parameters: int
    flops_per_step: float
    peak_memory_bytes: float  # per worker
    seconds: float
    workers: int = 1
    parallelism: str = "ddp"


def count_parameters(cfg: ModelConfig) -> int:
    return cfg.num_parameters()  # analytic; tests check it against the built model for every preset


def processor_in_channels(cfg: ModelConfig) -> int:
    """Channels the score processor reads (`dape_core.config.processor_in_channels`, the processor's own rule)."""
    return cfg.processor_in_channels


def map_costs(cfg: ModelConfig) -> list[Cost]:
    """What the processor and the encoding cost per score-map entry, per layer (their records)."""
    return [cfg.processor_facts.cost(cfg), cfg.encoding.cost(cfg)]


def forward_flops_per_sequence(cfg: ModelConfig, length: int, parameters: int) -> float:
    dense = 2 * (parameters - cfg.vocab_size * cfg.d_model) * length  # every non-embedding weight, 2 FLOPs/MAC
    attention = cfg.n_layer * 4 * cfg.n_head * cfg.head_dim * length**2  # QKᵀ and A·V
    components = sum(cfg.n_layer * 2 * cost.macs * length**2 for cost in map_costs(cfg) if cost.macs) or 0.0
    return dense + attention + components


def activation_bytes(model: ModelConfig, sequences: int, length: int) -> float:
    """Activations kept for the backward pass of `sequences` sequences, in float32: per layer the hidden
    states (about 16 x width per token) and the T x T maps (attention's, and those the processor's and the
    encoding's records state: DAPE's input, hidden and output channels)."""
    maps = model.n_head * 3 + sum(cost.stored for cost in map_costs(model))  # attention's, the components'
    return model.n_layer * sequences * (length * model.d_model * 16 + maps * length * length) * 4


def memory_per_worker(model: ModelConfig, cfg: ExperimentConfig, parameters: int) -> float:
    """Peak memory of one worker. Weights, gradients and AdamW's two moments are 16 bytes per parameter in
    float32. One worker holds them all; DDP holds a full replica per worker plus its gradient buckets (4
    bytes per parameter); FSDP holds 1/workers of them, plus, while a block runs, its gathered parameters
    (in bf16 with bf16 precision, for the running block and the prefetched next one) and its unsharded fp32
    gradients. Activations are those of one micro-batch of the worker's share of the batch
    (batch_size / workers / grad_accum sequences)."""
    train, size = cfg.train, cfg.distributed
    activations = activation_bytes(model, train.batch_size // (size.workers * train.grad_accum), train.seq_len)
    state = 16 * parameters
    if size.workers == 1:
        return state + activations
    if size.parallelism == "ddp":
        return state + 4 * parameters + activations
    block = (parameters - 2 * model.vocab_size * model.d_model) / model.n_layer
    gathered = block * (2 * (2 if train.precision == "bf16" else 4) + 4)
    return state / size.workers + gathered + activations


def estimate(cfg: ExperimentConfig, gpus: float, cpus: float) -> TrialEstimate:
    """gpus, cpus: per worker (`resources`); the trial's workers come from its `distributed` section."""
    model, train = cfg.model, cfg.train
    if cfg.che is not None:  # a CHE trial's model: the task's vocabulary, bidirectional for the encoder form
        model = cfg.che.model_config(model)
    parameters = count_parameters(model)
    flops = 3 * train.batch_size * forward_flops_per_sequence(model, train.seq_len, parameters)
    workers = cfg.distributed.workers
    throughput = workers * (GPU_FLOPS * gpus if gpus else CPU_FLOPS_PER_CORE * cpus)
    return TrialEstimate(parameters, flops, memory_per_worker(model, cfg, parameters),
                         flops * train.steps / throughput, workers, cfg.distributed.parallelism)


def evaluation_flops(cfg: ExperimentConfig, lengths: list[int] | tuple[int, ...] = ()) -> float:
    """The forward FLOPs of a trial's evaluation: every window of its `eval.lengths`, of its training length
    (ΔP) and of `lengths` (those it scores after them: a study's report.lengths), each window a full forward at
    its length (the protocol scores its tail). 0 for a CHE trial (its test strings are short next to training)."""
    if cfg.che is not None:
        return 0.0
    model = cfg.model
    parameters = count_parameters(model)
    scored = set(cfg.eval.lengths) | {cfg.train.seq_len} | set(lengths)
    return cfg.eval.windows_per_length * sum(forward_flops_per_sequence(model, length, parameters) for length in scored)


def evaluation_memory_bytes(model: ModelConfig, batch: int, length: int) -> float:
    """Peak memory of evaluating one batch of `batch` windows of `length` tokens (no gradients, so one layer's
    tensors at a time): the float32 weights, the hidden states of the batch (about 16 x width per token) and the
    T x T maps of one layer (attention, and the processor's channels), over the rows of one block where the
    block path runs beyond `eval_block_size` (dape_core.attention: at most 2**22 score entries per block)."""
    from dape_core.config import EVAL_BLOCK_ELEMENTS, MIN_BLOCK_ROWS

    rows = length
    if model.eval_block_size is not None and length > model.eval_block_size:
        rows = max(MIN_BLOCK_ROWS, min(model.eval_block_size, EVAL_BLOCK_ELEMENTS // (batch * length)))
    maps = model.n_head * 3 + sum(cost.stored for cost in map_costs(model))
    hidden = batch * length * model.d_model * 16 * 4
    return 4 * count_parameters(model) + hidden + batch * maps * rows * length * 4

"""Analytic cost estimates of a trial, for `orchestrator plan`: parameters, FLOPs, memory, duration.

Parameters are counted exactly (dape_core's analytic count, tested against the built models).
FLOPs and memory are the usual transformer terms plus the score processor's: a convolution from C_in
input channels to D hidden channels and back to H over the T x T score map, where C_in follows the form
(2H where it reads [S, B]: concat_residual and concat with a bias encoding; else H), about `3·H·D·k·T²`
extra multiply-adds per layer in the main form. The duration uses an assumed sustained throughput per
device kind and is an order-of-magnitude figure, labelled as such.
"""

from __future__ import annotations

from dataclasses import dataclass

from dape_core import ExperimentConfig, ModelConfig

# Sustained training throughput assumed for the duration estimate (FLOP/s).
CPU_FLOPS_PER_CORE = 25e9  # measured: the CPU preset trains at ~29 GFLOP/s on one core here
GPU_FLOPS = 150e12  # bf16 at ~40% of an H100/H200's dense peak


@dataclass
class TrialEstimate:
    parameters: int
    flops_per_step: float
    peak_memory_bytes: float
    seconds: float


def count_parameters(cfg: ModelConfig) -> int:
    return cfg.num_parameters()  # analytic; tests check it against the built model for every preset


def processor_in_channels(cfg: ModelConfig) -> int:
    """Channels the score processor reads: [S, B] (2H) in the concatenating forms with a bias encoding;
    S + B (add_residual), B alone (bias_only) or S alone (no bias encoding): H."""
    reads_both = cfg.has_bias and cfg.form in ("concat_residual", "concat")
    return (2 if reads_both else 1) * cfg.n_head


def forward_flops_per_sequence(cfg: ModelConfig, length: int, parameters: int) -> float:
    dense = 2 * (parameters - cfg.vocab_size * cfg.d_model) * length  # every non-embedding weight, 2 FLOPs/MAC
    attention = cfg.n_layer * 4 * cfg.n_head * cfg.head_dim * length**2  # QKᵀ and A·V
    processor = 0.0
    if cfg.processor != "none":
        kq, kk = cfg.kernel_shape
        k = kq * kk
        channels_in = processor_in_channels(cfg)
        processor = cfg.n_layer * 2 * (channels_in + cfg.n_head) * cfg.d_dape * k * length**2
    return dense + attention + processor


def estimate(cfg: ExperimentConfig, gpus: float, cpus: float) -> TrialEstimate:
    model, train = cfg.model, cfg.train
    if cfg.che is not None:  # a CHE trial's model: the task's vocabulary, bidirectional for the encoder form
        model = cfg.che.model_config(model)
    parameters = count_parameters(model)
    flops = 3 * train.batch_size * forward_flops_per_sequence(model, train.seq_len, parameters)
    # Weights, gradients and two AdamW moments in float32, plus activations kept for the backward pass.
    t, b, layers = train.seq_len, train.batch_size, model.n_layer
    processor_maps = processor_in_channels(model) + 2 * model.d_dape + model.n_head  # input, hidden (x2), output
    maps = model.n_head * 3 + (processor_maps if model.processor != "none" else 0)
    activations = layers * b * (t * model.d_model * 16 + maps * t * t) * 4
    memory = 16 * parameters + activations
    throughput = GPU_FLOPS * gpus if gpus else CPU_FLOPS_PER_CORE * cpus
    return TrialEstimate(parameters, flops, memory, flops * train.steps / throughput)

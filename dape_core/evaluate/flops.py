"""Analytic forward FLOPs per token (docs/method.md §6), read off the built model so every block is counted.

Per token at context length T (1 multiply-add = 2 FLOPs):
- every `nn.Linear` (QKV, output projection, MLP, LM head): in × out;
- the attention core, QKᵀ and A·V over the full T×T grid as the papers count it: 2 · T · d_model per layer;
- the score processor over the T×T score map: its record's multiply-adds per entry (i, j)
  (dape_core/components.py `Cost.macs`; DAPE's 1×k convolutions: Σ C_in · C_out · k), so T times that per token
  (docs/method.md §4: 3·H·D·k·T² per sequence with a bias PE, 2·H·D·k·T² without).
Not counted: embeddings (a lookup), norms, activations, softmax, position-encoding internals. A fused
causal kernel skips about half of the attention grid; this counts what the formulas count.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def _attention_modules(model: nn.Module) -> list[Any]:  # duck-typed: CausalSelfAttention's face
    return [module for module in model.modules() if hasattr(module, "qkv") and hasattr(module, "pos")]


def forward_flops_per_token(model: nn.Module, seq_len: int) -> float:
    attention = _attention_modules(model)
    skipped = {id(m) for attn in attention for m in attn.pos.modules()}  # PE internals are not per-token work
    processor_modules = {id(m) for attn in attention if getattr(attn, "processor", None) is not None
                         for m in attn.processor.modules()}
    macs = 0
    for module in model.modules():
        if id(module) in skipped:
            continue
        if isinstance(module, nn.Linear) and id(module) not in processor_modules:
            macs += module.in_features * module.out_features
    for attn in attention:
        d_model = attn.qkv.in_features
        macs += 2 * seq_len * d_model
        if getattr(attn, "processor", None) is not None:
            macs += attn.processor_cost.macs * seq_len
    return 2.0 * macs


def measured_forward_flops(model: nn.Module, tokens: torch.Tensor) -> float:
    """FLOPs of one forward counted by PyTorch's dispatcher (matmuls and convolutions), per token."""
    from torch.utils.flop_counter import FlopCounterMode

    from ..processors.base import convolutions

    # the processor's convolutions, as the analytic count has them (the CPU GEMM path skips all-zero blocks)
    with torch.no_grad(), convolutions(), FlopCounterMode(display=False) as counter:
        model(tokens)
    return counter.get_total_flops() / tokens.numel()

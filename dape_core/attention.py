"""Causal self-attention with a position encoding and an optional score processor (SPEC §1).

Per layer: S = QKᵀ/√d (Q, K rotated for the rotary family) -> bias B -> processor (S, B) -> A -> causal
mask -> softmax -> ·V. Three ways to compute it, all giving the same result:

- fused: no processor. PyTorch's `scaled_dot_product_attention`, with `is_causal` when there is no bias and
  with the bias as an additive mask (−inf above the diagonal) otherwise.
- direct: the reference formulation with a processor: the full [B, C, T, T] maps, as the authors compute it.
- block: query rows in blocks. Rows of a 1xk processor are independent, and a block of rows r0..r1−1 needs
  only the keys up to r1 − 1 plus the processor's key halo (k//2 columns, clipped at T, where the full
  formulation zero-pads too), and for a kq x kk kernel the 2(kq − 1) rows before it. Skipping the upper
  triangle roughly halves the work, and the maps of one block at a time fit in cache and in memory.
  With gradients each block is recomputed in backward (`torch.utils.checkpoint`), so a layer keeps only
  q, k and v. Without a processor, blocks call the fused kernel with the block's part of the bias.

Which path runs (see `ModelConfig.attention_block_size` and `eval_block_size`): training with a processor
uses the block path when `attention_block_size` is set, the direct path otherwise; training without one
uses the fused kernel; without gradients the block path is used automatically once T exceeds
`eval_block_size` (and with a bias but no processor, blocks call the fused kernel with their part of it).

With `ModelConfig.causal=False` (a bidirectional encoder, SPEC §7) there is no causal mask: every path
attends over all keys (a block then reads every key, not just those up to its last row).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

from .config import ModelConfig
from .position import PositionEncoding
from .processors import ScoreProcessor, build_processor

# Evaluation blocks hold at most this many score entries per batch (times ~100 floats of maps per entry).
EVAL_BLOCK_ELEMENTS = 2**22
MIN_BLOCK_ROWS = 16


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, encoding: PositionEncoding):
        super().__init__()
        self.n_head, self.head_dim = cfg.n_head, cfg.head_dim
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.pos = encoding
        self.processor: ScoreProcessor | None = build_processor(cfg, encoding.has_bias)
        self.train_block_rows = cfg.attention_block_size
        self.eval_block_rows = cfg.eval_block_size
        self.causal = cfg.causal

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = self.pos.rotate(q, k, positions, positions)
        out = self.attend(q, k, v, positions)
        return self.proj(out.transpose(1, 2).reshape(batch, length, width))

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """q, k, v: [B, H, T, d] (already rotated) -> [B, H, T, d], choosing the path as the module doc says."""
        if self.processor is None and not self.pos.has_bias:
            return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        rows = self.block_rows(q.shape[0], q.shape[2])
        if rows is None:
            return self.attend_rows(q, k, v, positions, 0, q.shape[2])
        return self.attend_blocks(q, k, v, positions, rows)

    def block_rows(self, batch: int, length: int) -> int | None:
        """Rows per block, or None for the direct path. Without a processor, training always takes the fused
        kernel over the whole sequence: its only T x T tensor is the bias, shared by the batch."""
        if self.training and torch.is_grad_enabled():
            return self.train_block_rows if self.processor is not None else None
        if self.eval_block_rows is None or length <= self.eval_block_rows:
            return None
        return max(MIN_BLOCK_ROWS, min(self.eval_block_rows, EVAL_BLOCK_ELEMENTS // (batch * length)))

    def attend_blocks(self, q, k, v, positions, rows: int) -> torch.Tensor:
        length = q.shape[2]
        recompute = torch.is_grad_enabled()
        outs = []
        for start in range(0, length, rows):
            stop = min(length, start + rows)
            if recompute:
                # No random ops inside a block, so the RNG state need not be saved for the recomputation.
                outs.append(checkpoint(self.attend_rows, q, k, v, positions, start, stop,
                                       use_reentrant=False, preserve_rng_state=False))
            else:
                outs.append(self.attend_rows(q, k, v, positions, start, stop))
        return torch.cat(outs, dim=2)

    def attend_rows(self, q, k, v, positions, start: int, stop: int) -> torch.Tensor:
        """Attention output of query rows start..stop−1: exactly those rows of the full formulation."""
        length = q.shape[2]
        processor = self.processor
        first = max(0, start - processor.row_halo) if processor is not None else start
        end = min(length, stop + (processor.key_halo if processor is not None else 0)) if self.causal else length
        q_pos, k_pos = positions[first:stop], positions[:end]
        future = k_pos[None, :] > positions[start:stop, None]  # [rows, keys]
        bias = self.pos.bias(q_pos, k_pos)
        if processor is None:
            mask = bias.to(q.dtype)
            if self.causal:
                mask = mask.masked_fill(future, float("-inf"))
            return F.scaled_dot_product_attention(q[:, :, start:stop], k[:, :, :end], v[:, :, :end], attn_mask=mask)
        # Scaling q rather than the scores: a pass over [rows, d] instead of [rows, keys].
        scores = (q[:, :, first:stop] / math.sqrt(self.head_dim)) @ k[:, :, :end].transpose(-2, -1)
        logits = processor(scores, bias, q_pos, k_pos)[:, :, start - first :]
        # Softmax in float32 at least (bf16/fp16 training), in the logits' precision otherwise.
        softmax_dtype = torch.promote_types(logits.dtype, torch.float32)
        if self.causal:
            logits = logits.masked_fill_(future, float("-inf"))
        weights = logits.softmax(dim=-1, dtype=softmax_dtype)
        return weights.to(v.dtype) @ v[:, :, :end]

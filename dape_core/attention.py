"""Causal self-attention with a position encoding and an optional score processor (docs/method.md §1).

Per layer: S = QKᵀ/√d (Q, K rotated for the rotary family) -> bias B -> processor (S, B) -> A -> causal
mask -> softmax -> ·V. Four ways to compute it, all giving the same result:

- fused: no processor. PyTorch's `scaled_dot_product_attention`, with `is_causal` when there is no bias and
  with the bias as an additive mask (−inf above the diagonal) otherwise. Where PyTorch would take its math
  path for it (on CPU: a bias per head, or one that needs a gradient), that path is computed here
  (`math_attention`, the same values, less a check for fully masked rows).
- fused processor (`dape_core.fused`): Triton kernels that compute the processor, the mask, the softmax and
  ·V tile by tile on chip, FlashAttention-style, in training and in evaluation; nothing of size T² is kept.
  Chosen automatically on CUDA when Triton is installed and the layer is supported (1 x k kernels, biases
  that depend on the distance only: all but FIRE; see `dape_core.fused.unsupported`) and its kernels launch
  on the GPU (`dape_core.fused.fit`: else a warning, once, and the other paths). `DAPE_FUSED_ATTENTION`
  (or a layer's `fused` attribute) forces it on ("1"; on CPU it then runs in Triton's interpreter,
  TRITON_INTERPRET=1, for tests) or off ("0").
- direct: the reference formulation with a processor: the full [B, C, T, T] maps, as the authors compute it.
- block: query rows in blocks. Rows of a 1xk processor are independent, and a block of rows r0..r1−1 needs
  only the keys up to r1 − 1 plus the processor's key halo (k//2 columns, clipped at T, where the full
  formulation zero-pads too), and for a kq x kk kernel the 2(kq − 1) rows before it. Skipping the upper
  triangle roughly halves the work, and the maps of one block at a time fit in cache and in memory.
  With gradients each block is recomputed in backward (`torch.utils.checkpoint`), so a layer keeps only
  q, k and v. Without a processor, blocks call the fused kernel with the block's part of the bias.

Which path runs (see `ModelConfig.attention_block_size` and `eval_block_size`): the fused processor path
where it applies; otherwise training with a processor uses the block path when `attention_block_size` is
set, the direct path otherwise; training without one uses the fused kernel; without gradients the block
path is used automatically once T exceeds `eval_block_size` (and with a bias but no processor, blocks call
the fused kernel with their part of it).

Training blocks on CUDA: `attention_block_size` switches the block path on, but the rows per block come
from a memory budget (`CUDA_BLOCK_BYTES` for one block's maps), as many as fit, and every block has one
shape: all keys 0..T−1 (the masked upper part of a block is computed and discarded), the last block
overlapping its predecessor instead of being shorter. Small blocks leave a GPU idle between launches (64
rows measured 10x to 25x slower than the direct path), and blocks of changing shapes make torch.compile
recompile and cuDNN re-plan; on CPU, blocks of `attention_block_size` rows that skip the upper triangle are
fastest (tests/benchmarks/bench_attention.py).

With `ModelConfig.causal=False` (a bidirectional encoder, docs/method.md §7) there is no causal mask: every path
attends over all keys (a block then reads every key, not just those up to its last row).
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.attention import SDPBackend
from torch.utils.checkpoint import checkpoint

import dape_core.fused as fused

from .config import EVAL_BLOCK_ELEMENTS, MIN_BLOCK_ROWS, ModelConfig
from .encodings.base import PositionEncoding
from .processors.base import ScoreProcessor, build_processor

# Training blocks on CUDA: one block's maps (forward, and backward's recomputation) stay under this many bytes.
CUDA_BLOCK_BYTES = 2**31
FUSED_ENV = "DAPE_FUSED_ATTENTION"  # "1": the fused processor path wherever supported, "0": never; unset: on CUDA


def fused_setting() -> bool | None:
    """The `DAPE_FUSED_ATTENTION` setting: True, False, or None (automatic)."""
    value = os.environ.get(FUSED_ENV, "").strip().lower()
    if value in ("", "auto"):
        return None
    if value in ("1", "true", "on"):
        return True
    if value in ("0", "false", "off"):
        return False
    raise ValueError(f"{FUSED_ENV}={value!r}: expected 1, 0 or auto")


def takes_math_path(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> bool:
    """Whether PyTorch's `scaled_dot_product_attention` would compute this call on its math path, as its own
    chooser says (`torch._fused_sdp_choice`), on CPU outside autocast: a mask per head ([H, rows, keys]: Kerple,
    ALiBi, FIRE) or one that needs a gradient is not one its CPU kernel takes. Elsewhere (CUDA's fused kernels,
    autocast's choice of precisions, a PyTorch without the chooser) PyTorch computes it."""
    choose = getattr(torch, "_fused_sdp_choice", None)
    if choose is None or q.device.type != "cpu" or torch.is_autocast_enabled("cpu"):
        return False
    return choose(q, k, v, mask, 0.0, False) == SDPBackend.MATH.value


def math_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """softmax(QKᵀ/√d + mask)·V as PyTorch's math path computes it (q and k each scaled by d^(-1/4), the mask
    added, softmax, ·V), bit for bit, output and gradients (tests/test_attention_paths.py), less the math path's
    `_safe_softmax`: a check over the whole map for rows masked entirely (zeroed instead of NaN), three passes
    that cost a Kerple training step about 5% and its evaluation about a fifth (issue 45). No row here is masked
    entirely: a query always sees its own key."""
    root_scale = math.sqrt(1.0 / math.sqrt(q.shape[-1]))
    scores = (q * root_scale) @ (k.transpose(-2, -1) * root_scale)
    return (scores + mask).softmax(dim=-1) @ v


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig, encoding: PositionEncoding, layer: int = 0, seed: int | None = None):
        super().__init__()
        self.n_head, self.head_dim = cfg.n_head, cfg.head_dim
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.pos = encoding
        self.processor: ScoreProcessor | None = build_processor(cfg, encoding.has_bias, layer, seed)
        self.processor_cost = cfg.processor_facts.cost(cfg)  # per score entry (its record), for the block budget
        self.train_block_rows = cfg.attention_block_size
        self.eval_block_rows = cfg.eval_block_size
        self.causal = cfg.causal
        self.fused: bool | None = None  # the fused processor path: None = automatic (see the module doc)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, tail: int | None = None) -> torch.Tensor:
        """x: [B, T, width] -> [B, T, width]; with `tail`, only the last `tail` rows' output, [B, tail, width]
        (see `attend_tail`)."""
        batch, length, width = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = self.pos.rotate(q, k, positions, positions)
        if tail is not None and tail < length:
            out = self.attend_tail(q, k, v, positions, tail)
            length = tail
        else:
            out = self.attend(q, k, v, positions)
        return self.proj(out.transpose(1, 2).reshape(batch, length, width))

    def attend_tail(self, q, k, v, positions, tail: int) -> torch.Tensor:
        """The attention output of the last `tail` query rows only (over all their keys), [B, H, tail, d]: the
        same rows as `attend` (within float tolerance). The evaluation scores only the last K positions, so the
        last layer needs no other rows (`CausalLM.forward(tail=)`). `attend_rows` reads the processor's row
        and key halos, so any kernel is exact; the fused processor path, where it runs, computes every row
        and the tail is sliced from it."""
        length = q.shape[2]
        start = length - tail
        if self.processor is None and not self.pos.has_bias:  # no bias to add: SDPA with the causal mask alone
            mask = torch.ones(tail, length, dtype=torch.bool, device=q.device).tril(start) if self.causal else None
            return F.scaled_dot_product_attention(q[:, :, start:], k, v, attn_mask=mask)
        if self.uses_fused(q):
            out = fused.fused_attention(self, q, k, v, forced=self.fused_forced())
            if out is not None:
                return out[:, :, start:]
        return self.attend_rows(q, k, v, positions, start, length)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """q, k, v: [B, H, T, d] (already rotated) -> [B, H, T, d], choosing the path as the module doc says."""
        if self.processor is None and not self.pos.has_bias:
            return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        if self.uses_fused(q):
            out = fused.fused_attention(self, q, k, v, forced=self.fused_forced())
            if out is not None:  # None: the kernels do not launch on this device (warned once), other paths
                return out
        training = self.training and torch.is_grad_enabled()
        uniform = training and q.is_cuda
        rows = self.block_rows(q.shape[0], q.shape[2], cuda=q.is_cuda, element_size=q.element_size())
        if rows is None:
            return self.attend_rows(q, k, v, positions, 0, q.shape[2])
        return self.attend_blocks(q, k, v, positions, rows, uniform=uniform)

    def uses_fused(self, q: torch.Tensor) -> bool:
        """Whether the fused processor path computes this call (see the module doc). Forcing it on where it
        cannot run is an error that says why."""
        setting = self.fused if self.fused is not None else fused_setting()
        if self.processor is None or setting is False or (setting is None and not q.is_cuda):
            return False
        if fused.unsupported(self, q) is not None:
            return False
        problem = fused.cannot_run(q.device)
        if problem is not None and setting is True:
            raise RuntimeError(f"the fused attention path was forced on ({FUSED_ENV}=1) but cannot run: {problem}")
        return problem is None

    def fused_forced(self) -> bool:
        """Whether the fused processor path is forced on (the layer's `fused`, else DAPE_FUSED_ATTENTION=1)."""
        return (self.fused if self.fused is not None else fused_setting()) is True

    def block_rows(self, batch: int, length: int, cuda: bool = False, element_size: int = 4) -> int | None:
        """Rows per block, or None for the direct path. Without a processor, training always takes the fused
        kernel over the whole sequence: its only T x T tensor is the bias, shared by the batch. Training
        blocks on CUDA take their rows from the memory budget (`cuda_block_rows`)."""
        if self.training and torch.is_grad_enabled():
            if self.processor is None or self.train_block_rows is None:
                return None
            return self.cuda_block_rows(batch, length, element_size) if cuda else self.train_block_rows
        if self.eval_block_rows is None or length <= self.eval_block_rows:
            return None
        return max(MIN_BLOCK_ROWS, min(self.eval_block_rows, EVAL_BLOCK_ELEMENTS // (batch * length)))

    def cuda_block_rows(self, batch: int, length: int, element_size: int) -> int:
        """As many rows as keep one block's maps (over all T keys) within CUDA_BLOCK_BYTES, evened out over
        the blocks and rounded up to MIN_BLOCK_ROWS. Per score entry a block holds the processor's working maps
        and their gradients (its record's `Cost.working`, twice: for DAPE z and the hidden map, 2·(C + D)),
        and S, the bias, the logits and their gradients (about 4·H), plus the float32 softmax."""
        working = self.processor_cost.working
        per_entry = element_size * (2 * working + 4 * self.n_head) + 4 * self.n_head
        rows = max(MIN_BLOCK_ROWS, CUDA_BLOCK_BYTES // (per_entry * batch * length) // MIN_BLOCK_ROWS * MIN_BLOCK_ROWS)
        if rows >= length:
            return length
        blocks = math.ceil(length / rows)
        return math.ceil(length / blocks / MIN_BLOCK_ROWS) * MIN_BLOCK_ROWS

    def attend_blocks(self, q, k, v, positions, rows: int, uniform: bool = False) -> torch.Tensor:
        """Blocks of `rows` query rows. `uniform`: every block the same shape (all keys; the last block ends
        at T and overlaps the one before, whose rows it does not return again)."""
        length = q.shape[2]
        recompute = torch.is_grad_enabled()
        outs, done = [], 0
        keys: dict[str, Any] = {"all_keys": True} if uniform else {}
        for start in range(0, length, rows):
            if uniform:
                start = max(0, min(start, length - rows))
            stop = min(length, start + rows)
            if recompute:
                # No random ops inside a block, so the RNG state need not be saved for the recomputation.
                out = checkpoint(self.attend_rows, q, k, v, positions, start, stop, **keys,
                                 use_reentrant=False, preserve_rng_state=False)
            else:
                out = self.attend_rows(q, k, v, positions, start, stop, **keys)
            outs.append(out[:, :, done - start :])
            done = stop
        return torch.cat(outs, dim=2)

    def attend_rows(self, q, k, v, positions, start: int, stop: int, all_keys: bool = False) -> torch.Tensor:
        """Attention output of query rows start..stop−1: exactly those rows of the full formulation.
        `all_keys`: read every key, not just those up to the rows' diagonal and the halo."""
        length = q.shape[2]
        processor = self.processor
        first = max(0, start - processor.row_halo) if processor is not None else start
        causal_end = min(length, stop + (processor.key_halo if processor is not None else 0))
        end = causal_end if self.causal and not all_keys else length
        q_pos, k_pos = positions[first:stop], positions[:end]
        future = k_pos[None, :] > positions[start:stop, None]  # [rows, keys]
        bias = self.pos.bias(q_pos, k_pos)
        if processor is None:
            assert bias is not None, "without a processor or a bias, attend() takes the causal SDPA path"
            mask = bias.to(q.dtype)
            if self.causal:
                mask = mask.masked_fill(future, float("-inf"))
            q, k, v = q[:, :, start:stop], k[:, :, :end], v[:, :, :end]
            if takes_math_path(q, k, v, mask):
                return math_attention(q, k, v, mask)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        # Scaling q rather than the scores: a pass over [rows, d] instead of [rows, keys].
        scores = (q[:, :, first:stop] / math.sqrt(self.head_dim)) @ k[:, :, :end].transpose(-2, -1)
        logits = processor(scores, bias, q_pos, k_pos)[:, :, start - first :]
        # Softmax in float32 at least (bf16/fp16 training), in the logits' precision otherwise.
        softmax_dtype = torch.promote_types(logits.dtype, torch.float32)
        if self.causal:
            logits = logits.masked_fill_(future, float("-inf"))
        weights = logits.softmax(dim=-1, dtype=softmax_dtype)
        return weights.to(v.dtype) @ v[:, :, :end]

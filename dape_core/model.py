"""A causal decoder-only LM with pluggable position encodings and score processors.

Per layer the attention follows SPEC §1: S = QKᵀ/√d (Q, K rotated for the rotary family) -> bias B ->
processor (S, B) -> A -> causal mask -> softmax -> ·V. Pre-LayerNorm blocks, GELU MLP, untied embeddings,
no dropout (SPEC §5).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from .config import ModelConfig
from .position import PositionEncoding, build_position_encoding
from .processors import ScoreProcessor, build_processor


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_head, self.head_dim = cfg.n_head, cfg.head_dim
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.pos: PositionEncoding = build_position_encoding(cfg)
        self.processor: ScoreProcessor | None = build_processor(cfg, self.pos.has_bias)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(x).view(batch, length, 3, self.n_head, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = self.pos.rotate(q, k, positions, positions)
        bias = self.pos.bias(positions, positions)
        if self.processor is None:
            out = self._fused(q, k, v, bias, positions)
        else:
            out = self._processed(q, k, v, bias, positions)
        return self.proj(out.transpose(1, 2).reshape(batch, length, width))

    def _fused(self, q, k, v, bias, positions):
        """No processor: PyTorch's fused kernel, with the bias and the causal mask as one additive mask."""
        if bias is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        future = positions[None, :] > positions[:, None]
        mask = bias.to(q.dtype).masked_fill(future, float("-inf"))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def _processed(self, q, k, v, bias, positions):
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        logits = self.processor(scores, bias, positions, positions)
        future = positions[None, :] > positions[:, None]
        weights = logits.masked_fill(future, float("-inf")).softmax(dim=-1)
        return weights @ v


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln_attn = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln_mlp = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model),
            nn.GELU(),
            nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model),
        )

    def forward(self, x, positions):
        x = x + self.attn(self.ln_attn(x), positions)
        return x + self.mlp(self.ln_mlp(x))


class CausalLM(nn.Module):
    """`model(tokens)` -> logits `[B, T, vocab]`; `model(tokens, targets)` -> `(logits, loss)`."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_final = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        # GPT-2 style init for the transformer; the processor's convolutions keep PyTorch's default (SPEC §3).
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None):
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, positions)
        logits = self.head(self.ln_final(x))
        if targets is None:
            return logits
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss


def build_model(cfg: ModelConfig) -> CausalLM:
    return CausalLM(cfg)

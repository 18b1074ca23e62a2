"""A causal decoder-only LM with pluggable position encodings and score processors.

Per layer the attention follows docs/method.md §1 (see `attention.py`): S = QKᵀ/√d (Q, K rotated for the rotary
family) -> bias B -> processor (S, B) -> A -> causal mask -> softmax -> ·V. Pre-LayerNorm blocks, GELU MLP of
`mlp_ratio` x width, untied embeddings, no dropout (docs/method.md §5).
"""

from __future__ import annotations

from typing import cast

import torch
from torch import nn
from torch.nn import functional as F

from .attention import CausalSelfAttention
from .config import ModelConfig
from .encodings.base import PositionEncoding, build_position_encodings


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, encoding: PositionEncoding):
        super().__init__()
        self.ln_attn = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg, encoding)
        self.ln_mlp = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model),
            nn.GELU(),
            nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model),
        )

    def forward(self, x, positions, tail: int | None = None):
        """With `tail`: only the last `tail` rows are computed and returned (the keys still read every row)."""
        attended = self.attn(self.ln_attn(x), positions, tail)
        x = (x if tail is None else x[:, -tail:]) + attended
        return x + self.mlp(self.ln_mlp(x))


class CausalLM(nn.Module):
    """`model(tokens)` -> logits `[B, T, vocab]`; `model(tokens, targets)` -> `(logits, loss)`."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg, encoding) for encoding in build_position_encodings(cfg))
        self.ln_final = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self._init_weights(self)

    @classmethod
    def _init_weights(cls, module: nn.Module) -> None:
        """GPT-2 style init (N(0, 0.02), zero biases) for the transformer's linear layers and embeddings.
        Position encodings (FIRE's MLP, T5's table) keep their own init and the processor's convolutions
        PyTorch's default (docs/method.md §3), so the walk stops at encodings."""
        if isinstance(module, PositionEncoding):
            return
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)
        for child in module.children():
            cls._init_weights(child)

    def num_parameters(self) -> int:
        """Parameters of the built model, shared ones (T5's table) counted once; equals
        `cfg.num_parameters()`, the analytic count."""
        return sum(p.numel() for p in self.parameters())

    # `forward(tokens, tail=K)` computes only the last K positions' logits (the evaluation's tail_loss reads it).
    supports_tail = True

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None, tail: int | None = None):
        """tail: only the logits of the last `tail` positions, [B, tail, vocab]. Only those rows are scored by
        the evaluation (docs/protocol.md), so the last layer computes only them (attention of those rows over
        all keys, with the processor's halo: `CausalSelfAttention.attend_tail`), and the final norm and the
        LM head read only them; the earlier layers compute every row, whose keys and values the last reads.
        The logits equal the full forward's last `tail` rows within float tolerance."""
        if tail is not None and targets is not None:
            raise ValueError("tail and targets exclude each other: the loss needs every position's logits")
        # One set of positions per forward pass, shared by every layer (randomized RoPE samples them here).
        first = cast(Block, self.blocks[0])
        positions = first.attn.pos.sequence_positions(tokens.shape[1], tokens.device)
        x = self.embed(tokens)
        last = len(self.blocks) - 1
        for index, block in enumerate(self.blocks):
            x = block(x, positions, tail if index == last else None)
        logits = self.head(self.ln_final(x))
        if targets is None:
            return logits
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss


def build_model(cfg: ModelConfig) -> CausalLM:
    return CausalLM(cfg)

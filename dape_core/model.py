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
from .random_streams import generator, model_seed


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, encoding: PositionEncoding, layer: int = 0, seed: int | None = None):
        super().__init__()
        self.ln_attn = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg, encoding, layer, seed)
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
    """`model(tokens)` -> logits `[B, T, vocab]`; `model(tokens, targets)` -> `(logits, loss)`.

    Built at `seed` (default: the seed PyTorch's global generator was last given), every initial weight comes
    from a stream keyed by the seed and by what the weight is (`dape_core/random_streams.py`): two variants
    built at one seed start from the same network wherever they share a parameter, whatever encodings,
    processors or plugins either adds; building draws nothing from the global generator."""

    def __init__(self, cfg: ModelConfig, seed: int | None = None):
        super().__init__()
        self.cfg = cfg
        seed = model_seed(seed)
        with torch.random.fork_rng(devices=[]):  # the modules' default inits, all overwritten or keyed below
            self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
            encodings = build_position_encodings(cfg, seed)
            self.blocks = nn.ModuleList(Block(cfg, encoding, layer, seed) for layer, encoding in enumerate(encodings))
            self.ln_final = nn.LayerNorm(cfg.d_model)
            self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self._init_weights(self, seed)

    @classmethod
    def _init_weights(cls, module: nn.Module, seed: int, name: str = "") -> None:
        """GPT-2 style init (N(0, 0.02), zero biases) for the transformer's linear layers and embeddings, each
        weight from the stream of its parameter's name at `seed`. Position encodings (FIRE's MLP, T5's table)
        keep their own init and the processor's convolutions PyTorch's default (docs/method.md §3), each drawn
        from its component's stream when it was built, so the walk stops at encodings."""
        if isinstance(module, PositionEncoding):
            return
        if isinstance(module, (nn.Linear, nn.Embedding)):
            key = f"{name}.weight"
            with torch.no_grad():
                module.weight.copy_(0.02 * torch.randn(module.weight.shape, generator=generator(seed, "base", key)))
            bias = getattr(module, "bias", None)
            if isinstance(bias, torch.Tensor):
                nn.init.zeros_(bias)
        for child_name, child in module.named_children():
            cls._init_weights(child, seed, f"{name}.{child_name}" if name else child_name)

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


def build_model(cfg: ModelConfig, seed: int | None = None) -> CausalLM:
    """The model of `cfg`, initialised at `seed` (default: the global generator's seed; see `CausalLM`)."""
    return CausalLM(cfg, seed)

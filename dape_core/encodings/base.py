"""The position encodings' common torch module (docs/method.md §2), and the building of a model's encodings.

Two kinds exist, and every encoding implements both hooks (the unused one is the identity):
- `rotate(q, k, q_pos, k_pos)`: the rotary family (RoPE, YaRN, randomized RoPE) transforms queries and keys
  before `Q Kᵀ`;
- `bias(q_pos, k_pos)`: additive biases (ALiBi, Kerple, FIRE, T5) return `[H, T_q, T_k]`; the others None.

Positions are explicit 1-D tensors so that a block of query rows (the memory-efficient path) asks for
exactly the part of the bias it needs. `sequence_positions(length, device)` gives the positions of one
forward pass: 0..T−1, except randomized RoPE in training mode.

Biases are evaluated at Δ = i − j clamped to ≥ 0, so entries above the diagonal hold the Δ = 0 value (the
authors' code does the same); the causal mask, and the `tril` before a processor, remove them. A
bidirectional model (`ModelConfig.causal=False`) sets `symmetric` on its encodings: biases are then taken at
Δ = |i − j|, so B equals its transpose (T5 then uses its causal buckets of |Δ|, FIRE its usual normalisation).

Each encoding is one file of this folder: its record and its module (built when a model is built).
"""

from __future__ import annotations

import torch
from torch import nn

from ..random_streams import component_stream, model_seed
from ..registry import Encoding, LayerConfig


def causal_distance(q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """Δ = i − j below the diagonal and 0 above it."""
    return (q_pos[:, None] - k_pos[None, :]).clamp(min=0)


def symmetric_distance(q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """Δ = |i − j| (bidirectional encoders)."""
    return (q_pos[:, None] - k_pos[None, :]).abs()


class PositionEncoding(nn.Module):
    """Base: no rotation, no bias (NoPE). `facts` is what the encoding is (its record, dape_core/encodings.py),
    set by `build_position_encodings`; a module built on its own has none."""

    facts: Encoding | None = None
    symmetric = False  # set by `build_position_encodings` for a bidirectional model

    @property
    def has_bias(self) -> bool:
        return self.facts is not None and self.facts.has_bias

    @property
    def toeplitz(self) -> bool:
        """The bias depends on the distance Δ alone (the fused attention path reads it from a table)."""
        return self.facts is not None and self.facts.toeplitz

    def distance(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """The Δ a bias is evaluated at: i − j clamped at 0 (causal) or |i − j| (symmetric)."""
        return symmetric_distance(q_pos, k_pos) if self.symmetric else causal_distance(q_pos, k_pos)

    def sequence_positions(self, length: int, device: torch.device) -> torch.Tensor:
        return torch.arange(length, device=device)

    def rotate(self, q: torch.Tensor, k: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor):
        return q, k

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
        return None


def build_position_encodings(cfg: LayerConfig, seed: int | None = None) -> list[PositionEncoding]:
    """One encoding per layer. Learnable encodings (Kerple, FIRE) have per-layer parameters, as in the
    authors' code; T5's table is one module shared by all layers (docs/method.md §2). Each is built from its
    own random stream: the seed, the encoding's name and the layer, or "shared" (dape_core/random_streams.py)."""
    facts = cfg.encoding  # its record builds it (dape_core/encodings.py, contrib or a plugin)
    build = facts.build
    assert build is not None, "a registered encoding has its builder (Encoding.check)"
    seed = model_seed(seed)

    def built(layer: int | str) -> PositionEncoding:
        with component_stream(seed, "encoding", facts.name, layer):
            return build(cfg)

    if facts.shared:
        encodings = [built("shared")] * cfg.n_layer
    else:
        encodings = [built(layer) for layer in range(cfg.n_layer)]
    for encoding in encodings:
        encoding.facts = facts
        encoding.symmetric = not cfg.causal
    return encodings


def build_position_encoding(cfg: LayerConfig) -> PositionEncoding:
    """A single layer's encoding (for tests and tools that look at one layer)."""
    one_layer: type = type(cfg)  # the config's own class (ModelConfig), built again with one layer
    return build_position_encodings(one_layer(**{**cfg.to_dict(), "n_layer": 1}))[0]

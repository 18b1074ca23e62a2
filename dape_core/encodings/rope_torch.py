"""The rotary family's torch modules: RoPE, YaRN and randomized RoPE, one each built on RoPE's rotation (their
records: `rope.py`)."""

from __future__ import annotations

import math

import torch

from .base import PositionEncoding


def rotate_half(x):
    """cat(−x₂, x₁) over the last axis (a tensor's halves)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


class RoPE(PositionEncoding):
    """Rotary embedding, base 10000, full head dim, half-split rotation (`rotate_half = cat(−x₂, x₁)`).

    cos/sin are computed from the positions on every call, so any evaluation length works (the authors'
    cache covered only the training length).
    """

    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        self.head_dim = head_dim
        self.inv_freq: torch.Tensor
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def frequencies(self, length: int) -> tuple[torch.Tensor, float]:
        """(inverse frequencies, factor on cos/sin) for a forward pass over `length` keys."""
        return self.inv_freq, 1.0

    def _rotate(self, x: torch.Tensor, pos: torch.Tensor, inv_freq: torch.Tensor, factor: float) -> torch.Tensor:
        angles = pos.to(torch.float32)[:, None] * inv_freq.float()[None, :]  # [T, d/2], float32 for long T
        angles = torch.cat([angles, angles], dim=-1)
        cos, sin = (angles.cos() * factor).to(x.dtype), (angles.sin() * factor).to(x.dtype)
        return x * cos + rotate_half(x) * sin

    def rotate(self, q, k, q_pos, k_pos):
        inv_freq, factor = self.frequencies(k_pos.numel())
        return self._rotate(q, q_pos, inv_freq, factor), self._rotate(k, k_pos, inv_freq, factor)


class YaRN(RoPE):
    """RoPE trained as usual, scaled at evaluation time (Peng et al., "YaRN", 2023).

    Decision D5: s = L_eval / L_train with L_eval the number of keys of the forward pass; no fine-tuning.
    For s ≤ 1 this is plain RoPE. For s > 1, dimension pair d with frequency θ_d completes
    r_d = L_train·θ_d / 2π turns over the training length; with the ramp γ(r) = clamp((r − β_slow) /
    (β_fast − β_slow), 0, 1), β_fast = 32, β_slow = 1, the frequency becomes (1 − γ)·θ_d / s + γ·θ_d
    (fast dimensions keep θ_d, slow ones are interpolated), and cos/sin are multiplied by
    mscale = 0.1·ln(s) + 1, so the logits grow by mscale² (the paper's √(1/t) applied to q and k).
    Where the reference code rounds the ramp to whole dimension indices, this follows the paper's
    formula on r directly.
    """

    BETA_FAST, BETA_SLOW = 32.0, 1.0

    def __init__(self, head_dim: int, train_length: int, base: float = 10000.0):
        super().__init__(head_dim, base)
        self.train_length = train_length

    def frequencies(self, length: int) -> tuple[torch.Tensor, float]:
        scale = length / self.train_length
        if scale <= 1.0:
            return self.inv_freq, 1.0
        turns = self.train_length * self.inv_freq / (2 * math.pi)
        keep = ((turns - self.BETA_SLOW) / (self.BETA_FAST - self.BETA_SLOW)).clamp(0.0, 1.0)
        inv_freq = (1 - keep) * self.inv_freq / scale + keep * self.inv_freq
        return inv_freq, 0.1 * math.log(scale) + 1.0


class RandomizedRoPE(RoPE):
    """RoPE over randomized positions (Ruoss et al. 2023): in training mode the positions of a forward pass
    are a sorted sample without replacement from [0, L_max), one sample per step shared by the batch and
    every layer (as in the authors' implementation); in evaluation mode 0..T−1.
    L_max: see `ModelConfig.rope_random_max` (Decision D6)."""

    def __init__(self, head_dim: int, max_position: int, base: float = 10000.0):
        super().__init__(head_dim, base)
        self.max_position = max_position

    def sequence_positions(self, length: int, device: torch.device) -> torch.Tensor:
        if not self.training:
            return torch.arange(length, device=device)
        if length > self.max_position:
            raise ValueError(f"randomized RoPE cannot sample {length} distinct positions from "
                             f"[0, {self.max_position}); raise rope_random_max")
        return torch.randperm(self.max_position, device=device)[:length].sort().values

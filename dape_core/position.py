"""Position encodings (docs/method.md §2), each a small module behind one interface.

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
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from .config import ModelConfig
    from .registry import Encoding

# docs/method.md §2 constants that are not study parameters (the records' parameter counts read them too).
T5_BUCKETS, T5_MAX_DISTANCE = 32, 128


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


class NoPE(PositionEncoding):
    """Nothing but the causal mask."""


def rotate_half(x: torch.Tensor) -> torch.Tensor:
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


def alibi_slopes(n_head: int) -> torch.Tensor:
    """m_k = 2^(−8(k+1)/H) for H a power of two; otherwise the slopes of the nearest lower power of two
    followed by every other slope of the doubled count (Press et al.)."""

    def power_of_two(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (k + 1) / n) for k in range(n)]

    if math.log2(n_head).is_integer():
        return torch.tensor(power_of_two(n_head))
    lower = 2 ** math.floor(math.log2(n_head))
    extra = power_of_two(2 * lower)[0::2][: n_head - lower]
    return torch.tensor(power_of_two(lower) + extra)


class ALiBi(PositionEncoding):
    """B = −m_h · Δ with fixed (not learnable) slopes."""

    slopes: torch.Tensor  # a buffer (register_buffer): typed for the checker, which cannot see it

    def __init__(self, n_head: int):
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(n_head), persistent=False)

    def bias(self, q_pos, k_pos):
        return -self.slopes[:, None, None] * self.distance(q_pos, k_pos).to(self.slopes.dtype)


class _Kerple(PositionEncoding):
    """Learnable per-head p and a, p ~ 2·U(0,1), a ~ U(0,1) (the authors' init for both variants).

    The parameters are clamped in place on every forward, as in the authors' code, so they stay in range
    between steps and gradients are never cut by a clamp. The clamp goes through `.data`, which autograd does
    not track: row blocks and recomputation may call `bias` several times in one step.
    """

    EPS = 0.01
    P_MAX: float | None = None

    def __init__(self, n_head: int):
        super().__init__()
        self.p = nn.Parameter(2 * torch.rand(n_head))
        self.a = nn.Parameter(torch.rand(n_head))

    def clamp_parameters(self) -> None:
        self.p.data.clamp_(min=self.EPS, max=self.P_MAX)
        self.a.data.clamp_(min=self.EPS)


class KerpleLog(_Kerple):
    """B = −p_h · log(1 + a_h · Δ); p, a ≥ 0.01."""


    def bias(self, q_pos, k_pos):
        self.clamp_parameters()
        distance = self.distance(q_pos, k_pos).to(self.p.dtype)
        return -self.p[:, None, None] * torch.log1p(self.a[:, None, None] * distance)


class KerplePower(_Kerple):
    """B = −a_h · Δ^{p_h}; p ∈ [0.01, 2], a ≥ 0.01."""

    P_MAX = 2.0

    def bias(self, q_pos, k_pos):
        self.clamp_parameters()
        distance = self.distance(q_pos, k_pos).to(self.p.dtype)
        # Δ^p through Δ ≥ 1 only: at Δ = 0 the gradient of Δ^p with respect to p would be 0·log 0.
        power = distance.clamp(min=1.0)[None] ** self.p[:, None, None]
        return -self.a[:, None, None] * torch.where(distance > 0, power, torch.zeros_like(power))


class FIRE(PositionEncoding):
    """B = MLP(ψ(Δ) / (ψ(max(i, L)) + 1e-6)), ψ(x) = log(|c·x| + 1), L = |λ·L₀| (Li et al. 2023).

    Learnable c (init 0.1) and λ (init 1); MLP Linear(1, W) → ReLU → Linear(W, H) with PyTorch's default
    init. Decisions D8, D9: W is FIRE's own width (`fire_width`, default 32), independent of D_dape; L₀
    defaults to the training length. One module per layer, like Kerple.
    """


    def __init__(self, n_head: int, width: int, threshold: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(1, width), nn.ReLU(), nn.Linear(width, n_head))
        self.c = nn.Parameter(torch.tensor(0.1))
        self.lam = nn.Parameter(torch.tensor(1.0))
        self.threshold = float(threshold)

    def _psi(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(torch.abs(self.c * x) + 1)

    def bias(self, q_pos, k_pos):
        dtype = self.c.dtype
        distance = self.distance(q_pos, k_pos).to(dtype)
        horizon = torch.maximum(q_pos.to(dtype), torch.abs(self.lam * self.threshold))  # [T_q]
        normalized = self._psi(distance) / (self._psi(horizon)[:, None] + 1e-6)
        return self.mlp(normalized.unsqueeze(-1)).permute(2, 0, 1)


def t5_causal_bucket(distance: torch.Tensor, buckets: int = T5_BUCKETS,
                     max_distance: int = T5_MAX_DISTANCE) -> torch.Tensor:
    """T5's unidirectional bucketing of Δ ≥ 0: exact below buckets/2, log-spaced up to max_distance, then the
    last bucket."""
    exact = buckets // 2
    far = distance.clamp(min=exact).float()
    log_bucket = exact + (torch.log(far / exact) / math.log(max_distance / exact) * (buckets - exact)).long()
    return torch.where(distance < exact, distance, log_bucket.clamp(max=buckets - 1))


class T5Bias(PositionEncoding):
    """B = table[bucket(Δ)] · √d: 32 causal buckets, max distance 128, one learned `[buckets, H]` table shared
    by all layers (docs/method.md §2; the scale √d follows the authors' code). The table starts at N(0, 0.02²), the
    init of the model's other embeddings (the spec is silent)."""


    def __init__(self, n_head: int, head_dim: int, buckets: int = T5_BUCKETS, max_distance: int = T5_MAX_DISTANCE):
        super().__init__()
        self.table = nn.Parameter(0.02 * torch.randn(buckets, n_head))
        self.scale = math.sqrt(head_dim)
        self.buckets, self.max_distance = buckets, max_distance

    def bias(self, q_pos, k_pos):
        bucket = t5_causal_bucket(self.distance(q_pos, k_pos), self.buckets, self.max_distance)
        return (self.table[bucket] * self.scale).permute(2, 0, 1)


def build_position_encodings(cfg: ModelConfig) -> list[PositionEncoding]:
    """One encoding per layer. Learnable encodings (Kerple, FIRE) have per-layer parameters, as in the
    authors' code; T5's table is one module shared by all layers (docs/method.md §2)."""
    facts = cfg.encoding  # its record builds it (dape_core/encodings.py, contrib or a plugin)
    assert facts.build is not None, "a registered encoding has its builder (Encoding.check)"
    if facts.shared:
        encodings = [facts.build(cfg)] * cfg.n_layer
    else:
        encodings = [facts.build(cfg) for _ in range(cfg.n_layer)]
    for encoding in encodings:
        encoding.facts = facts
        encoding.symmetric = not cfg.causal
    return encodings


def build_position_encoding(cfg: ModelConfig) -> PositionEncoding:
    """A single layer's encoding (for tests and tools that look at one layer)."""
    return build_position_encodings(cfg.__class__(**{**cfg.to_dict(), "n_layer": 1}))[0]

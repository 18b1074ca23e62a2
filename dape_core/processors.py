"""Score processors (SPEC §3–§4): map the pre-softmax scores S and the position bias B to logits A.

DAPE v1 (an MLP across heads, point-wise over (i, j)) is the 1x1 case of DAPE V2's 1xk convolution along
the key axis, so both are one module: `ConvScoreProcessor` with `kernel_size=1` is DAPE v1.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .config import ModelConfig


class ScoreProcessor(nn.Module):
    """Interface: `forward(scores [B,H,Tq,Tk], bias [H,Tq,Tk] | None, q_pos, k_pos) -> logits [B,H,Tq,Tk]`."""

    def forward(self, scores, bias, q_pos, k_pos):  # pragma: no cover - interface
        raise NotImplementedError


class ConvScoreProcessor(ScoreProcessor):
    """`tril(z) -> Conv(C_in -> D, 1xk) -> LeakyReLU(0.01) -> Conv(D -> H, 1xk)`, combined by `form`.

    Forms (SPEC §3): concat_residual `S + B + f([S, B])` (the main method), concat `S + f([S, B])`,
    add_residual `S + B + f(S + B)`, bias_only `S + B + f(B)`. Without a bias PE (NoPE, RoPE): `S + f(S)`.
    `leak=True` skips the tril, letting row i read future scores (the paper's leakage experiment).
    """

    def __init__(self, n_head: int, has_bias: bool, d_dape: int, kernel_size: int, form: str, leak: bool):
        super().__init__()
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f"kernel_size must be odd and >= 1, got {kernel_size}")
        if form == "bias_only" and not has_bias:
            raise ValueError("form 'bias_only' needs a position encoding with a bias (alibi, kerple, ...)")
        self.form = form if has_bias else "no_bias"
        self.leak = leak
        self.kernel_size = kernel_size
        in_channels = 2 * n_head if self.form in ("concat_residual", "concat") else n_head
        padding = (0, kernel_size // 2)
        self.conv_in = nn.Conv2d(in_channels, d_dape, (1, kernel_size), padding=padding)
        self.conv_out = nn.Conv2d(d_dape, n_head, (1, kernel_size), padding=padding)

    def features(self, scores: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if self.form in ("concat_residual", "concat"):
            return torch.cat([scores, bias.expand_as(scores)], dim=1)
        if self.form == "add_residual":
            return scores + bias
        if self.form == "bias_only":
            return bias.expand_as(scores)
        return scores

    def residual(self, scores: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return scores if self.form in ("concat", "no_bias") else scores + bias

    def forward(self, scores, bias, q_pos, k_pos):
        z = self.features(scores, bias)
        if not self.leak:
            future = k_pos[None, :] > q_pos[:, None]  # [Tq, Tk]
            z = z.masked_fill(future, 0.0)
        f = self.conv_out(F.leaky_relu(self.conv_in(z), negative_slope=0.01))
        return self.residual(scores, bias) + f


def build_processor(cfg: ModelConfig, has_bias: bool) -> ScoreProcessor | None:
    if cfg.processor == "none":
        return None
    if cfg.processor in ("dape", "dapev2"):
        return ConvScoreProcessor(
            cfg.n_head, has_bias, cfg.d_dape, cfg.effective_kernel_size, cfg.form, cfg.leak
        )
    raise ValueError(f"unknown processor {cfg.processor!r}; valid: none, dape, dapev2")

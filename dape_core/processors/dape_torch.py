"""DAPE's and DAPE V2's torch module, `ConvScoreProcessor`, and its `TrilConcat` (their records: `dape.py`,
which says what the module computes and its halos).

On CPU both convolutions run as batched GEMMs (`score_conv.py`); elsewhere as PyTorch's convolutions over z,
which `TrilConcat` writes once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.nn import functional as F

from .base import ScoreProcessor
from .score_conv import applies, conv_pair

if TYPE_CHECKING:
    from ..registry import Form


class ConvScoreProcessor(ScoreProcessor):
    """`tril(z) -> Conv(C_in -> D, kq x kk) -> LeakyReLU(0.01) -> Conv(D -> H, kq x kk)`, combined by `form`.

    Forms (docs/method.md §3): concat_residual `S + B + f([S, B])` (the main method), concat `S + f([S, B])`,
    add_residual `S + B + f(S + B)` (Decision D11: our reading, H input channels), bias_only `S + B + f(B)`.
    Without a bias PE (NoPE and the rotary family): `S + f(S)` with H input channels.

    Along the keys each convolution is centred (padding kk//2 both sides, zeros past the sequence end). Along
    the queries (kq > 1, this project's extension) each convolution is padded with kq − 1 zero rows on the
    past side only, so row i reads rows i−kq+1..i, all of which hold only tokens ≤ i after the `tril`.
    `leak=True` skips the `tril`, letting row i read future scores (the paper's leakage experiment).
    `causal=False` (a bidirectional encoder) skips it too: such a model reads both sides by design.
    Default PyTorch init for both convolutions (docs/method.md §3).
    """

    def __init__(self, n_head: int, form: Form, in_channels: int, d_dape: int, kernel: tuple[int, int] | int,
                 leak: bool, causal: bool = True):
        super().__init__()
        rows, cols = (1, kernel) if isinstance(kernel, int) else kernel  # ModelConfig checked both (odd cols)
        self.form = form.name  # what it computes: the study's form, or `no_bias` without a bias encoding
        self.form_facts = form  # what z is and whether B is added back (forms.py)
        self.leak = leak
        self.tril = causal and not leak
        self.kernel = (rows, cols)
        self.key_halo = (1 if self.tril else 2) * (cols // 2)
        self.row_halo = 2 * (rows - 1)
        padding = (0, cols // 2)  # rows are padded causally in `_conv`
        self.conv_in = nn.Conv2d(in_channels, d_dape, (rows, cols), padding=padding)
        self.conv_out = nn.Conv2d(d_dape, n_head, (rows, cols), padding=padding)

    def feature_parts(self, scores: torch.Tensor, bias: torch.Tensor | None) -> list[torch.Tensor]:
        """The processor's input channels z, as parts to concatenate over the head axis (the form's record)."""
        parts = self.form_facts.parts
        assert parts is not None, "a registered form has its parts (Form.check)"
        return parts(scores, bias)

    def _conv(self, conv: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
        if self.kernel[0] > 1:
            x = F.pad(x, (0, 0, self.kernel[0] - 1, 0))  # past side of the query axis only
        return conv(x)

    def forward(self, scores, bias, q_pos, k_pos):
        """Returns a new tensor, which the caller may modify in place (the causal mask)."""
        if bias is not None:
            bias = bias.to(scores.dtype)
        keep = None if not self.tril else (k_pos[None, :] <= q_pos[:, None]).to(scores.dtype)  # tril
        if applies(scores):  # CPU: both convolutions as batched GEMMs (score_conv.py)
            logits = conv_pair(keep, scores.shape[0], self.conv_in, self.conv_out, self.feature_parts(scores, bias))
        else:
            z = TrilConcat.apply(keep, scores.shape[0], *self.feature_parts(scores, bias))
            hidden = F.leaky_relu(self._conv(self.conv_in, z), negative_slope=0.01, inplace=True)
            logits = self._conv(self.conv_out, hidden).contiguous()  # f, back to [B, H, Tq, Tk] rows
        logits.add_(scores)  # + S
        if self.form_facts.adds_bias:
            logits.add_(bias)  # + B
        return logits


class TrilConcat(torch.autograd.Function):
    """z = tril(concat(parts)) written once, straight into channels-last layout.

    `torch.cat`, the `tril` and the layout change would each make a pass over the [B, C, Tq, Tk] map; this
    makes one. Channels-last is the layout in which PyTorch's CPU convolutions run fastest here (measured:
    about 20% on the processor's forward + backward, tests/benchmarks/bench_attention.py). Parts are
    [B, H, Tq, Tk] or batch-free [H, Tq, Tk] (the bias); `keep` is the float lower-triangle mask, or None.
    """

    @staticmethod
    def forward(ctx, keep, batch, *parts):
        first = parts[0]
        channels = sum(part.shape[-3] for part in parts)
        z = torch.empty((batch, channels, *first.shape[-2:]), dtype=first.dtype, device=first.device,
                        memory_format=torch.channels_last)
        offset = 0
        for part in parts:
            target = z[:, offset : offset + part.shape[-3]]
            source = part.expand_as(target)
            if keep is None:
                target.copy_(source)
            else:
                torch.mul(source, keep, out=target)
            offset += part.shape[-3]
        ctx.save_for_backward(keep)
        ctx.shapes = [part.shape for part in parts]
        return z

    @staticmethod
    def backward(ctx, grad):
        (keep,) = ctx.saved_tensors
        grads: list[torch.Tensor | None] = []
        offset = 0
        for index, shape in enumerate(ctx.shapes):
            if not ctx.needs_input_grad[index + 2]:
                grads.append(None)
            else:
                part = grad[:, offset : offset + shape[-3]]
                part = part if keep is None else part * keep
                grads.append(part.sum(0) if len(shape) == 3 else part.contiguous())
            offset += shape[-3]
        return (None, None, *grads)

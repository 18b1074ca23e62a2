"""DAPE and DAPE V2 (docs/method.md §3–§4): the convolutional score processor family, its two records and its
torch module.

DAPE v1 (an MLP across heads, point-wise over (i, j)) is the 1x1 case of DAPE V2's 1xk convolution along the
key axis, so both records build one module, `ConvScoreProcessor`, and share its cost: C_in input channels (the
form's), D hidden channels, H output channels, a kq x kk kernel; with a 1x1 kernel it has DAPE v1's parameter
shapes (a state dict moves between them). Their settings are ModelConfig fields (`model.kernel_size`,
`model.d_dape`, `model.form`, `model.leak`, `model.attention_block_size`: the names studies and stored runs use).

Halos (`base.ScoreProcessor`): with the `tril`, z is zero right of the diagonal, but the first convolution's
bias makes its output non-zero there and the second reads k//2 of those columns: key halo k//2. Without the
`tril` (leak), z itself is non-zero there: halo 2·(k//2). Row halo: (kq − 1) per convolution.

The records load without torch (validating a study reads them); the module is defined when a model is built.
"""

from __future__ import annotations

from functools import cache
from types import SimpleNamespace
from typing import TYPE_CHECKING

from ..registry import Cost, Processor, Setting, forms
from .forms import processor_form, processor_in_channels

if TYPE_CHECKING:
    from ..registry import Form


def _conv_kernel(cfg) -> tuple[int, int]:
    """(query rows, key columns) of DAPE V2's kernel: an odd k (1 x k) or a pair (kq, kk)."""
    return (1, cfg.kernel_size) if isinstance(cfg.kernel_size, int) else tuple(cfg.kernel_size)


def _pointwise(cfg) -> tuple[int, int]:
    return (1, 1)


def _conv_cost(cfg) -> Cost:
    """Conv(C_in -> D) and Conv(D -> H) over the map: (C_in + H)·D·kq·kk multiply-adds per entry; kept for the
    backward: the input, the hidden map before and after the activation, the output (C_in + 2D + H floats);
    a training block holds z and the hidden map and their gradients (C_in + D, twice)."""
    rows, cols = cfg.kernel_shape
    taps = rows * cols
    c_in, d, heads = cfg.processor_in_channels, cfg.d_dape, cfg.n_head
    return Cost(parameters=(c_in * d * taps + d) + (d * heads * taps + heads), macs=(c_in + heads) * d * taps,
                stored=c_in + 2 * d + heads, working=c_in + d)


def _form_without_bias(cfg) -> set[str]:
    return set() if cfg.has_bias else {"form"}  # the processor then reads S alone


@cache
def modules() -> SimpleNamespace:
    """The torch modules (ConvScoreProcessor, TrilConcat), defined the first time a model is built: the records
    below load without torch (validating a study reads them)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    from .base import ScoreProcessor
    from .score_conv import applies, conv_pair

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
                logits = conv_pair(keep, scores.shape[0], self.conv_in, self.conv_out,
                                              self.feature_parts(scores, bias))
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

    return SimpleNamespace(ConvScoreProcessor=ConvScoreProcessor, TrilConcat=TrilConcat)


def _build_conv(cfg, has_bias: bool):
    """The module, when a model is built (validating a study loads no torch)."""
    form = processor_form(cfg.form, has_bias)
    return modules().ConvScoreProcessor(cfg.n_head, forms[form], processor_in_channels(cfg.n_head, has_bias, cfg.form),
                              cfg.d_dape, cfg.kernel_shape, cfg.leak, cfg.causal)


# DAPE's settings: ModelConfig fields (`model.d_dape`, ...), the names studies and stored runs use.
_COMMON = (Setting("d_dape", label="DAPE width", field=True), Setting("form", label="DAPE form", field=True),
           Setting("leak", label="leakage", step_cost=False, field=True),
           Setting("attention_block_size", label="attention block size", step_cost=False, field=True))

DAPE = Processor("dape", "DAPE", _build_conv, cost=_conv_cost, settings=_COMMON, unread=_form_without_bias,
                 kernel=_pointwise, fused=True)
DAPEV2 = Processor("dapev2", "DAPE V2", _build_conv, cost=_conv_cost,
                   settings=(Setting("kernel_size", label="kernel size", field=True), *_COMMON),
                   unread=_form_without_bias, kernel=_conv_kernel, fused=True)

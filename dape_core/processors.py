"""Score processors (docs/method.md §3–§4): map the pre-softmax scores S and the position bias B to logits A.

DAPE v1 (an MLP across heads, point-wise over (i, j)) is the 1x1 case of DAPE V2's 1xk convolution along
the key axis, so both are one module: `ConvScoreProcessor` with a 1x1 kernel is DAPE v1, with the same
parameter shapes (a state dict moves between them).

A processor also states which neighbourhood one query row depends on, so that attention can be computed in
blocks of rows (see `attention.py`):
- `key_halo`: columns beyond the last row's diagonal that its logits read. With the `tril`, z is zero right
  of the diagonal, but the first convolution's bias makes its output non-zero there and the second reads
  k//2 of those columns: halo k//2. Without the `tril` (leak), z itself is non-zero there: halo 2·(k//2).
- `row_halo`: earlier query rows read by a kernel taller than one row: (kq − 1) per convolution.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from .config import ModelConfig, processor_form, processor_in_channels
from .processor_records import FORMS
from .score_conv import applies as conv_pair_applies
from .score_conv import conv_pair


class ScoreProcessor(nn.Module):
    """Interface: `forward(scores [B,H,Tq,Tk], bias [H,Tq,Tk] | None, q_pos, k_pos) -> logits [B,H,Tq,Tk]`.

    `q_pos`/`k_pos` are the positions of the rows and columns given; rows and keys are contiguous ranges of
    the sequence, keys starting at its first token.
    """

    key_halo = 0
    row_halo = 0
    facts = None  # its record (dape_core/components.py `Processor`), set by `build_processor`

    def forward(self, scores, bias, q_pos, k_pos):  # pragma: no cover - interface
        raise NotImplementedError


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

    def __init__(self, n_head: int, has_bias: bool, d_dape: int, kernel: tuple[int, int] | int, form: str, leak: bool,
                 causal: bool = True):
        super().__init__()
        rows, cols = (1, kernel) if isinstance(kernel, int) else kernel  # ModelConfig checked both (odd cols)
        self.form = processor_form(form, has_bias)
        self.form_facts = FORMS[self.form]  # what z is and whether B is added back (processor_records.py)
        self.leak = leak
        self.tril = causal and not leak
        self.kernel = (rows, cols)
        self.key_halo = (1 if self.tril else 2) * (cols // 2)
        self.row_halo = 2 * (rows - 1)
        in_channels = processor_in_channels(n_head, has_bias, form)
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
        if conv_pair_applies(scores):  # CPU: both convolutions as batched GEMMs (score_conv.py)
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


def build_processor(cfg: ModelConfig, has_bias: bool) -> ScoreProcessor | None:
    """The layer's processor, built by its record (None without one); the module keeps its record as `facts`."""
    facts = cfg.processor_facts
    if facts.build is None:  # `none`: no processor (what Processor.present reads)
        return None
    processor = facts.build(cfg, has_bias)
    processor.facts = facts
    return processor

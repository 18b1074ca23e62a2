"""DAPE and DAPE V2 (docs/method.md §3–§4): the convolutional score processor family, its two records (its torch
module, `ConvScoreProcessor`, is `dape_torch.py`).

DAPE v1 (an MLP across heads, point-wise over (i, j)) is the 1x1 case of DAPE V2's 1xk convolution along the
key axis, so both records build one module, `ConvScoreProcessor`, and share its cost: C_in input channels (the
form's), D hidden channels, H output channels, a kq x kk kernel; with a 1x1 kernel it has DAPE v1's parameter
shapes (a state dict moves between them). Their settings are ModelConfig fields (`model.kernel_size`,
`model.d_dape`, `model.form`, `model.leak`, `model.attention_block_size`: the names studies and stored runs use).

Halos (`base.ScoreProcessor`): with the `tril`, z is zero right of the diagonal, but the first convolution's
bias makes its output non-zero there and the second reads k//2 of those columns: key halo k//2. Without the
`tril` (leak), z itself is non-zero there: halo 2·(k//2). Row halo: (kq − 1) per convolution.

The records load without torch (validating a study reads them); the builder imports the module when a model is built.
"""

from __future__ import annotations

from ..registry import Cost, Processor, Setting, forms
from .forms import processor_form, processor_in_channels


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


def _build_conv(cfg, has_bias: bool):
    """The module, when a model is built (validating a study loads no torch)."""
    form = processor_form(cfg.form, has_bias)
    from .dape_torch import ConvScoreProcessor

    return ConvScoreProcessor(cfg.n_head, forms[form], processor_in_channels(cfg.n_head, has_bias, cfg.form),
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

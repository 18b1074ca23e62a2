"""The score processors and processor forms of docs/method.md §3–§4, one record each
(`dape_core.registry.Processor`, `Form`): what the config, the attention paths, the fused kernels, the FLOP
count, the plan's estimates and the report's labels read. What a processor computes is `processors.py`'s
(`ConvScoreProcessor`, built by the records' `build`).

DAPE v1 (an MLP across heads) is the 1x1 case of DAPE V2's convolution, so both records build the same module
and share its cost: C_in input channels (the form's), D hidden channels, H output channels, a kq x kk kernel.

It loads without torch: validating a study reads it.
"""

from __future__ import annotations

from .registry import (
    Cost,
    Form,
    Processor,
    Setting,
    forms,
    processors,
    register_form,
    register_processor,
)


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


def processor_form(form: str, has_bias: bool) -> str:
    """The form a processor computes: `form`, or "no_bias" (S + f(S)) without a bias encoding."""
    return form if has_bias else "no_bias"


def processor_in_channels(n_head: int, has_bias: bool, form: str) -> int:
    """Channels the score processor reads (its form's record): [S, B] (2H) in the concatenating forms with a
    bias encoding; S + B (add_residual), B alone (bias_only) or S alone (no bias encoding): H."""
    return forms[processor_form(form, has_bias)].channels * n_head


def _build_conv(cfg, has_bias: bool):
    """The module, when a model is built (validating a study loads no torch)."""
    from .processors import ConvScoreProcessor

    form = processor_form(cfg.form, has_bias)
    return ConvScoreProcessor(cfg.n_head, forms[form], processor_in_channels(cfg.n_head, has_bias, cfg.form),
                              cfg.d_dape, cfg.kernel_shape, cfg.leak, cfg.causal)


# DAPE's settings: ModelConfig fields (`model.d_dape`, ...), the names studies and stored runs use.
_COMMON = (Setting("d_dape", label="DAPE width", field=True), Setting("form", label="DAPE form", field=True),
           Setting("leak", label="leakage", step_cost=False, field=True),
           Setting("attention_block_size", label="attention block size", step_cost=False, field=True))

for _form in (
    Form("concat_residual", "concat + residual", lambda s, b: [s, b], channels=2, fused_mode=0),
    Form("concat", "concat", lambda s, b: [s, b], channels=2, adds_bias=False, fused_mode=0),
    Form("add_residual", "add + residual", lambda s, b: [s + b], fused_mode=1),
    Form("bias_only", "bias only", lambda s, b: [b], needs_bias=True, fused_mode=2),
    Form("no_bias", "scores only", lambda s, b: [s], adds_bias=False, fused_mode=3, choice=False),
):
    register_form(_form)

for _processor in (
    Processor("none", "no processor"),
    Processor("dape", "DAPE", _build_conv, cost=_conv_cost, settings=_COMMON, unread=_form_without_bias,
              kernel=_pointwise, fused=True),
    Processor("dapev2", "DAPE V2", _build_conv, cost=_conv_cost,
              settings=(Setting("kernel_size", label="kernel size", field=True), *_COMMON), unread=_form_without_bias,
              kernel=_conv_kernel, fused=True),
):
    if _processor.present:
        register_processor(_processor)
    else:
        processors.add(_processor, check=False)  # the absence of a processor: nothing to build or cost

FORMS = forms  # the registries (dape_core/registry.py): these, contrib's and plugins'
PROCESSORS = processors

"""The processor forms of docs/method.md §3, one record each (`dape_core.registry.Form`): how a score
processor's output combines with S and B, and what its input z is. The fused kernels build z by each form's
`fused_mode` (their Z_MODE). It loads without torch.
"""

from __future__ import annotations

from ..registry import Form, forms

CONCAT_RESIDUAL = Form("concat_residual", "concat + residual", lambda s, b: [s, b], channels=2, fused_mode=0)
CONCAT = Form("concat", "concat", lambda s, b: [s, b], channels=2, adds_bias=False, fused_mode=0)
ADD_RESIDUAL = Form("add_residual", "add + residual", lambda s, b: [s + b], fused_mode=1)
BIAS_ONLY = Form("bias_only", "bias only", lambda s, b: [b], needs_bias=True, fused_mode=2)
NO_BIAS = Form("no_bias", "scores only", lambda s, b: [s], adds_bias=False, fused_mode=3, choice=False)
RECORDS = (CONCAT_RESIDUAL, CONCAT, ADD_RESIDUAL, BIAS_ONLY, NO_BIAS)  # the order a study's error lists them in


def processor_form(form: str, has_bias: bool) -> str:
    """The form a processor computes: `form`, or "no_bias" (S + f(S)) without a bias encoding."""
    return form if has_bias else "no_bias"


def processor_in_channels(n_head: int, has_bias: bool, form: str) -> int:
    """Channels the score processor reads (its form's record): [S, B] (2H) in the concatenating forms with a
    bias encoding; S + B (add_residual), B alone (bias_only) or S alone (no bias encoding): H."""
    return forms[processor_form(form, has_bias)].channels * n_head

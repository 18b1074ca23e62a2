"""The papers' evaluation protocol (docs/method.md §6): perplexity by length on the last K tokens, ΔP, time and
memory cost, analytic FLOPs, and heat maps of learned position patterns."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_attributes

_PUBLIC = {  # name -> the submodule it lives in
    "DEFAULT_TOKENS_PER_LENGTH": "config", "EvalConfig": "config", "PROTOCOL_VERSION": "config",
    "forward_flops_per_token": "flops",
    "measured_forward_flops": "flops", "delta_p": "perplexity", "perplexity_by_length": "perplexity",
    "tail_loss": "perplexity", "forward_ms": "timing", "forward_ms_by_length": "timing",
    "forward_ms_from_evaluation": "timing", "peak_memory_bytes": "timing", "reset_peak_memory": "timing",
    "attention_rows": "visualise", "save_heat_maps": "visualise", "attention_maps": "visualise",
    "save_attention_maps": "visualise", "visualise_window": "visualise",
}
__all__ = list(_PUBLIC)

if TYPE_CHECKING:
    from .config import DEFAULT_TOKENS_PER_LENGTH, PROTOCOL_VERSION, EvalConfig
    from .flops import forward_flops_per_token, measured_forward_flops
    from .perplexity import delta_p, perplexity_by_length, tail_loss
    from .timing import (
        forward_ms,
        forward_ms_by_length,
        forward_ms_from_evaluation,
        peak_memory_bytes,
        reset_peak_memory,
    )
    from .visualise import attention_maps, attention_rows, save_attention_maps, save_heat_maps, visualise_window

__getattr__, __dir__ = lazy_attributes(__name__, _PUBLIC)

"""The papers' evaluation protocol (SPEC §6): perplexity by length on the last K tokens, ΔP, time and
memory cost, analytic FLOPs, and heat maps of learned position patterns."""

from .config import DEFAULT_TOKENS_PER_LENGTH, EvalConfig
from .flops import forward_flops_per_token, measured_forward_flops
from .perplexity import delta_p, perplexity_by_length, tail_loss
from .timing import (forward_ms, forward_ms_by_length, forward_ms_from_evaluation, peak_memory_bytes,
                     reset_peak_memory)
from .visualise import attention_rows, save_heat_maps

__all__ = [
    "DEFAULT_TOKENS_PER_LENGTH", "EvalConfig", "forward_flops_per_token", "measured_forward_flops", "delta_p",
    "perplexity_by_length", "tail_loss", "forward_ms", "forward_ms_by_length", "forward_ms_from_evaluation",
    "peak_memory_bytes", "reset_peak_memory", "attention_rows", "save_heat_maps",
]

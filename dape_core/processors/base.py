"""The score processors' common torch module (docs/method.md §3–§4): map the pre-softmax scores S and the
position bias B to logits A; and the building of a layer's processor from its record.

A processor also states which neighbourhood one query row depends on, so that attention can be computed in
blocks of rows (see `attention.py`):
- `key_halo`: columns beyond the last row's diagonal that its logits read.
- `row_halo`: earlier query rows read by a kernel taller than one row.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn

from ..random_streams import component_stream, model_seed
from ..registry import LayerConfig

_gemm_path = True  # a processor may compute its convolutions its own way on CPU (score_conv.py's GEMMs)


def gemm_path() -> bool:
    """Whether processors may use their own CPU formulation (False inside `convolutions()`)."""
    return _gemm_path


@contextmanager
def convolutions() -> Iterator[None]:
    """Within the block, processors run PyTorch's convolutions on CPU too (the formulation `Cost.macs` counts;
    the benchmarks' and tests' reference: tests/benchmarks/bench_processor.py). The switch is the core's (the
    FLOP counts read it for any model), so that a processor's own files are only the trials' that build it."""
    global _gemm_path
    before, _gemm_path = _gemm_path, False
    try:
        yield
    finally:
        _gemm_path = before


class ScoreProcessor(nn.Module):
    """Interface: `forward(scores [B,H,Tq,Tk], bias [H,Tq,Tk] | None, q_pos, k_pos) -> logits [B,H,Tq,Tk]`.

    `q_pos`/`k_pos` are the positions of the rows and columns given; rows and keys are contiguous ranges of
    the sequence, keys starting at its first token.
    """

    key_halo = 0
    row_halo = 0
    facts = None  # its record (dape_core/registry.py `Processor`), set by `build_processor`

    def forward(self, scores, bias, q_pos, k_pos):  # pragma: no cover - interface
        raise NotImplementedError


def build_processor(cfg: LayerConfig, has_bias: bool, layer: int = 0, seed: int | None = None) -> ScoreProcessor | None:
    """The layer's processor, built by its record (None without one) from its own random stream (the seed, the
    processor's name and the layer: dape_core/random_streams.py); the module keeps its record as `facts`."""
    facts = cfg.processor_facts
    if facts.build is None:  # `none`: no processor (what Processor.present reads)
        return None
    with component_stream(model_seed(seed), "processor", facts.name, layer):
        processor = facts.build(cfg, has_bias)
    processor.facts = facts
    return processor

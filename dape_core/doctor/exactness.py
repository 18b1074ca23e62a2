"""The fused attention kernels against the direct path on this device: one attention layer of DAPE1x3-Kerple
(and 1x5 on a GPU), its output and every gradient, in the dtypes training uses here, at a small size (on a GPU
the 125M layer's heads and channels at T = 256, beyond the self-check's 64-row slice; on CPU, in Triton's
interpreter, 3 heads at T = 40). The comparison is the self-check's rule (`dape_core.fused.selfcheck`) on the
whole input, and the kernels run forced on, so their own first-call self-check, whose cost is reported, must pass first.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch

from . import FAIL, PASS, SKIP, Outcome

SIZES = {  # ModelConfig fields and the sequence length of the check
    "cuda": {"n_head": 12, "d_model": 768, "d_dape": 32, "length": 256},
    "cpu": {"n_head": 3, "d_model": 48, "d_dape": 8, "length": 40},
}


@dataclass(frozen=True)
class Case:
    kernel_size: int
    dtype: torch.dtype
    training: bool

    @property
    def label(self) -> str:
        dtype = str(self.dtype).removeprefix("torch.")
        autocast = " (autocast, float32 weights)" if self.dtype in (torch.bfloat16, torch.float16) else ""
        return f"DAPE1x{self.kernel_size}-Kerple {'training' if self.training else 'evaluation'}, {dtype}{autocast}"


def cases(device: torch.device) -> list[Case]:
    """What training and evaluation run on this device: bfloat16 autocast on a GPU (and float32, whose products
    are exact to float32 there), float32 on CPU (the interpreter multiplies bfloat16 in float32: not a test)."""
    if device.type == "cuda":
        return [Case(3, torch.bfloat16, True), Case(3, torch.bfloat16, False), Case(3, torch.float32, True),
                Case(5, torch.bfloat16, True)]
    return [Case(3, torch.float32, True), Case(3, torch.float32, False)]


def fused_processor() -> str:
    """The processor the fused kernels are checked with: the first registered one they compute whose kernel
    width is a setting (dape_core/components.py; DAPE V2)."""
    from dape_core.components import processors

    return next(name for name, record in processors.items()
                if record.fused and "kernel_size" in record.settings)


def run(device: torch.device, chosen: list[Case] | None = None) -> list[Outcome]:
    import dape_core.fused as fused

    problem = fused.cannot_run(device)
    if problem is not None:
        return [Outcome(SKIP, "fused kernels' exactness", problem)]
    return [check(case, device) for case in (chosen if chosen is not None else cases(device))]


def check(case: Case, device: torch.device) -> Outcome:
    import dape_core.fused as fused
    from dape_core.attention import CausalSelfAttention
    from dape_core.config import ModelConfig
    from dape_core.encodings.base import build_position_encoding
    from dape_core.fused import selfcheck

    size: dict[str, Any] = dict(SIZES["cuda" if device.type == "cuda" else "cpu"])
    length = size.pop("length")
    name = f"fused = direct, {case.label}, T={length}"
    cfg = ModelConfig(preset="tiny", pos_encoding="kerple", processor=fused_processor(), kernel_size=case.kernel_size,
                      **size)
    torch.manual_seed(0)
    layer = CausalSelfAttention(cfg, build_position_encoding(cfg)).to(device).train(case.training)
    generator = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, cfg.n_head, length, cfg.head_dim, generator=generator).to(device, case.dtype)
               for _ in range(3))
    low = case.dtype in (torch.bfloat16, torch.float16)
    autocast = torch.autocast(device.type, dtype=case.dtype) if low else nullcontext()
    piece = selfcheck.Slice(layer, q, k, v, length)
    params = {f"layer.{n}": p for n, p in layer.named_parameters() if n.startswith(("processor.", "pos."))}
    fused.start_record()
    try:
        with autocast, torch.set_grad_enabled(case.training):
            inputs = [x.clone().requires_grad_(case.training) for x in (piece.q, piece.k, piece.v)]
            out = fused.fused_attention(layer, *inputs, forced=True)  # type: ignore[misc, arg-type]  # inputs: q, k, v
            assert out is not None, "forced on, the fused path raises rather than returning None"
            grads: dict[str, torch.Tensor | None] | None = None
            if case.training:
                found = torch.autograd.grad(out, [*inputs, *params.values()], piece.d_out, allow_unused=True)
                grads = dict(zip(["q", "k", "v", *params], found))
            result = selfcheck.check_slice(piece, case.dtype, out.detach(), grads)
    except RuntimeError as error:  # forced on: kernels that do not launch, or a failed first-call self-check
        return Outcome(FAIL, name, str(error))
    fit = next(iter(fused.recorded_fits().values()))
    cost = (f"first call {fit.seconds:.2f} s (tiles {_tiles(fit.tiles, case.training)}: compilation, probe and "
            f"self-check), of which the self-check {1e3 * fit.check.seconds:.0f} ms")
    detail = f"{result.describe()}; {cost}"
    return Outcome(PASS if result.passed else FAIL, name, detail)


def _tiles(tiles, training: bool) -> str:
    backward = f" + {tiles.bwd_rows}x{tiles.bwd_cols}" if training else ""
    return f"{tiles.fwd_rows}x{tiles.fwd_cols}{backward}"

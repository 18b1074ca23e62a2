"""The fused kernels check themselves against the reference formulation on the device they run on.

A compiled kernel can differ from Triton's interpreter, where the tests run (dot precision, masking, layout, a
Triton or driver version), and a wrong attention kernel does not crash: it trains a slightly different model.
So the first call of each configuration (`fit.fitted`, where the tile sizes are probed on the same slice) compares
the kernels' output and every gradient (of q, k, v and of each parameter of the processor and the encoding) with
the layer's direct path (`CausalSelfAttention.attend_rows`: the reference formulation) computed in the same dtype
and under the same autocast, both measured against the direct path in float64 on the same inputs.

The rule, per tensor X, by norm (in float64):

    ‖X_fused − X_exact‖ ≤ MARGIN · ‖X_direct − X_exact‖ + FLOOR · ε · ‖X_exact‖

X_exact is the direct path in float64, ε the machine epsilon of the accumulators (float32 for float16, bfloat16
and float32 inputs; float64 for float64). The kernels may thus be off by MARGIN times the reference formulation's
own low-precision error (in bfloat16 both have been measured at the same error against float64:
tests/test_fused_attention.py), and the floor covers float32 and float64, where the direct path's own error is
zero or below the noise of a different summation order. By norm rather than element-wise: one pre-activation
within rounding of LeakyReLU's kink may sit on either side of it in either path, which changes one entry's
gradient by 100x (tests/benchmarks/bench_attention.py `difference`). Gradients that are exactly zero (conv_out's
bias: each softmax row's gradient sums to zero) are left out. A NaN or an infinity anywhere fails.

The check's own copies of the layer's parameters (`torch.func.functional_call`) take its gradients: the layer's
parameters, their `.grad` and whatever DDP or FSDP attached to them are left alone, and the global RNG is not
drawn from (the output gradient comes from a private generator).
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

MARGIN = 4.0
FLOOR = 256.0
ZERO = 1e-9  # a gradient is "exactly zero" when its float64 norm is below this fraction of the largest one
SEED = 0  # of the output gradient the backward is checked with
NOTHING = "nothing to compare: every tensor is exactly zero on this slice"


@dataclass(frozen=True)
class Difference:
    """One tensor's errors against float64, relative to its float64 norm."""

    name: str
    error: float  # the fused kernels'
    reference: float  # the direct path's, in the same dtype
    allowed: float

    @property
    def ok(self) -> bool:
        return self.error <= self.allowed  # False for NaN

    @property
    def ratio(self) -> float:
        """The error as a multiple of the tolerance (above 1: the check fails)."""
        return self.error / self.allowed if math.isfinite(self.error) else math.inf


@dataclass(frozen=True)
class Check:
    """The comparison of one configuration: every tensor's difference, and what it cost."""

    differences: tuple[Difference, ...]
    seconds: float = 0.0  # the reference computations and the comparison (the kernels' launches are the probe's)

    @property
    def passed(self) -> bool:
        return all(difference.ok for difference in self.differences)

    @property
    def worst(self) -> Difference | None:
        """The tensor nearest its tolerance, or beyond it the furthest; None where every one is exactly zero."""
        return max(self.differences, key=lambda difference: difference.ratio, default=None)

    def describe(self) -> str:
        worst = self.worst
        if worst is None:
            return NOTHING
        return (f"worst {worst.name}: relative error {worst.error:.2g} against float64, {worst.ratio:.2g}x its "
                f"tolerance {worst.allowed:.2g} ({MARGIN:g}x the direct path's own {worst.reference:.2g} + "
                f"{FLOOR:g} eps)")

    def summary(self) -> str:
        worst = self.worst
        return NOTHING if worst is None else f"worst {worst.name} at {worst.ratio:.2g}x its tolerance"


class _Layer(nn.Module):
    """A layer's direct path and the fused kernels' inputs, as functions of the parameters functional_call swaps in."""

    def __init__(self, layer: nn.Module):
        super().__init__()
        self.layer: Any = layer  # a CausalSelfAttention (attention.py imports this package)

    def forward(self, what: str, *args):
        layer = self.layer
        if what == "direct":
            q, k, v = args
            length = q.shape[2]
            return layer.attend_rows(q, k, v, torch.arange(length, device=q.device), 0, length)
        from .launch import bias_table, pack_weights

        spec, length, device = args
        table = bias_table(layer.pos, length, device) if spec.has_bias else None
        return table, pack_weights(layer.processor, spec)


class Slice:
    """The first sequence and first `length` rows of a call's q, k, v, the check's own copies of the layer's
    processor and encoding parameters, and an output gradient: what the probe launches the kernels on and the
    self-check compares."""

    def __init__(self, layer: nn.Module, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, length: int):
        self.module = _Layer(layer)
        self.q, self.k, self.v = (x[:1, :, :length].detach() for x in (q, k, v))
        self.params = {f"layer.{name}": p.detach() for name, p in layer.named_parameters()
                       if name.startswith(("processor.", "pos."))}
        generator = torch.Generator().manual_seed(SEED)
        self.d_out = torch.randn(self.q.shape, generator=generator, dtype=torch.float64).to(q.device, q.dtype)

    def kernel_inputs(self, spec, backward: bool):
        """(the bias table or None, the packed weights, the parameter copies they were made from): with `backward`
        differentiable in those copies, so that the kernels' gradients of them map back to the parameters'."""
        leaves = {name: p.clone().requires_grad_(backward) for name, p in self.params.items()}
        with torch.set_grad_enabled(backward):
            table, weights = torch.func.functional_call(self.module, leaves, ("inputs", spec, self.q.shape[2],
                                                                              self.q.device), strict=False)
        return table, weights, leaves

    def fused_gradients(self, table, weights, leaves, grads) -> dict[str, torch.Tensor | None]:
        """The kernels' gradients (`launch.run_backward`'s dq, dk, dv, d_table, weight gradients) as gradients of
        q, k, v and of each parameter (through the packing, by autograd)."""
        dq, dk, dv, d_table, weight_grads = grads
        pairs = [(x, g) for x, g in zip((table, *weights), (d_table, *weight_grads))
                 if x is not None and x.requires_grad]
        names = list(leaves)
        found = torch.autograd.grad([x for x, _ in pairs], list(leaves.values()), [g for _, g in pairs],
                                    allow_unused=True) if pairs else [None] * len(names)
        return {"q": dq, "k": dk, "v": dv, **dict(zip(names, found))}

    def direct(self, backward: bool, dtype: torch.dtype | None = None):
        """The direct path's output and (with `backward`) gradients on this slice: in the inputs' dtype under the
        caller's autocast, or with `dtype` (float64) without autocast."""
        cast = (lambda x: x.to(dtype)) if dtype is not None else (lambda x: x)
        leaves = {name: cast(p).clone().requires_grad_(backward) for name, p in self.params.items()}
        inputs = [cast(x).clone().requires_grad_(backward) for x in (self.q, self.k, self.v)]
        autocast = torch.autocast(self.q.device.type, enabled=False) if dtype is not None else nullcontext()
        with torch.set_grad_enabled(backward), autocast:
            out = torch.func.functional_call(self.module, leaves, ("direct", *inputs), strict=False)
            if not backward:
                return out.detach(), {}
            grads = torch.autograd.grad(out, [*inputs, *leaves.values()], cast(self.d_out).to(out.dtype),
                                        allow_unused=True)
        return out.detach(), dict(zip(["q", "k", "v", *leaves], grads))


def epsilon(dtype: torch.dtype) -> float:
    """The machine epsilon of the kernels' accumulators for inputs of `dtype`."""
    return torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).eps


def compare(fused: dict[str, torch.Tensor | None], direct: dict[str, torch.Tensor | None],
            exact: dict[str, torch.Tensor | None], dtype: torch.dtype) -> Check:
    """The rule of the module doc over every tensor `exact` has (None: no gradient, taken as zero)."""
    def norm(x):
        return 0.0 if x is None else x.double().norm().item()

    def diff(a, b):
        a = a.double() if a is not None else torch.zeros((), dtype=torch.float64)
        b = b.double().to(a.device) if b is not None else torch.zeros((), dtype=torch.float64, device=a.device)
        return (a - b).norm().item()

    largest = max((norm(x) for x in exact.values()), default=0.0)
    differences = []
    for name, want in exact.items():
        scale = norm(want)
        if want is None or scale <= ZERO * largest:
            continue
        if fused.get(name) is None:  # a gradient the kernels did not give: all of it is error
            error = 1.0
        else:
            error = diff(fused[name], want) / scale
        reference = diff(direct.get(name), want) / scale if direct.get(name) is not None else 0.0
        allowed = MARGIN * reference + FLOOR * epsilon(dtype)
        differences.append(Difference(_label(name), error, reference, allowed))
    return Check(tuple(differences))


def _label(name: str) -> str:
    if name in ("q", "k", "v"):
        return f"gradient of {name}"
    if name == "output":
        return name
    return f"gradient of {name.removeprefix('layer.')}"


def check_slice(piece: Slice, dtype: torch.dtype, out: torch.Tensor,
                grads: dict[str, torch.Tensor | None] | None) -> Check:
    """Compare the kernels' `out` (and `grads`, from `Slice.fused_gradients`; None: forward only) on `piece` with
    the direct path in `dtype` and in float64."""
    start = time.perf_counter()
    backward = grads is not None
    exact_out, exact_grads = piece.direct(backward, torch.float64)
    if dtype == torch.float64 and not torch.is_autocast_enabled(piece.q.device.type):
        direct_out, direct_grads = exact_out, exact_grads  # the same computation: its own error is zero
    else:
        direct_out, direct_grads = piece.direct(backward)
    check = compare({"output": out, **(grads or {})}, {"output": direct_out, **direct_grads},
                    {"output": exact_out, **exact_grads}, dtype)
    return Check(check.differences, time.perf_counter() - start)

"""The fused attention path for convolutional score processors: Triton kernels, on CUDA or, for tests, on CPU
through Triton's interpreter (TRITON_INTERPRET=1). Triton is imported only when the path runs.

What it computes is exactly the reference formulation of `attention.py` (the processor of `processors.py`:
z = tril(parts of [S, B]), Conv(1 x k) -> LeakyReLU(0.01) -> Conv(1 x k), + S (+ B), causal mask,
softmax, · V), with the softmax and every accumulation in float32 at least.

Design
- Forward (`kernels.dape_forward_kernel`): one program per M query rows of one sequence, all heads together
  (the convolutions mix heads). It walks the key axis in tiles, FlashAttention-style: scores of the tile
  (one batched matrix product over heads), the bias read from a per-distance table, z, the first
  convolution, LeakyReLU, the second, the residual, the causal mask, then an online softmax and the
  product with V, all on chip. Nothing of size T² is written; tiles right of the rows' diagonal are skipped.
- Shifts along the key axis: a 1 x k convolution reads k//2 columns each side, so a tile computes NZ
  columns and owns only the inner NZ − 4·(k//2) of them (the logits read the hidden map k//2 away, which
  reads z k//2 further): neighbouring tiles overlap by the halo, and every map is computed once per tile
  instead of being recomputed for every shift. Inside a tile the processor's maps are points-major
  [M·NZ, channels], so that its channel mixing is a matrix product ([P, C] @ [C, D] per tap) and a shift
  is a gather along the points. The halo just right of the diagonal is covered by construction: the tril
  zeroes z there, but the hidden map is b_in there (not zero), and the tile computes it like any other column.
- Backward (`kernels.dape_backward_kernel` + matrix products on the host): a program recomputes its tiles
  (from the saved log-sum-exp, so no second pass over the keys), then runs the chain backward on chip:
  dP = dO·Vᵀ, dA = P·(dP − Δ), the second convolution's weight and input gradients, LeakyReLU', the first
  convolution's, the tril, to dS = ∂L/∂S (and the bias's share, reduced along diagonals into the table's
  gradient). A tile owns NZ − 8·(k//2) columns in the backward (dS reads dA 2·(k//2) further out). The
  kernel writes dS and the softmax weights of the rows of one chunk; dq = dS·K, dk = dSᵀ·Q and dv = Pᵀ·dO
  are then three batched matrix products (cuBLAS). Why not accumulate dq, dk, dv in the kernel as
  FlashAttention does: with all heads in one program, each of those accumulators holds H times more than
  FlashAttention's (12 x 16 x 64 values for a 16-row tile of a 125M layer), too much for registers, and
  atomics on them would cost tens of operations per score. Chunks of rows bound the two maps to
  `BACKWARD_CHUNK_BYTES`, so training memory stays bounded at any length (one chunk up to T = 1024 at
  batch 16 on a 125M layer in bf16).
- Gradients of the weights and biases: per-program slots summed on the host (no contention); the bias
  table's: atomics, one per diagonal of a tile and head.

Tile sizes and the self-check (`fit`, `selfcheck`): whether a kernel launches depends on the GPU's shared memory
per block (the 32-column tiles need 121 KB forward and 128 KB backward: fine on sm_80 and sm_90, too much for the
99 KB of sm_86 and sm_89), and what a compiled kernel computes may differ from the interpreter the tests run in.
The first call of each configuration (kernel shape, dtype, kernel size, form, bias kind, causal or not; training
or evaluation) tries `launch.tile_choices` in order on a short slice of its inputs, keeps the first that launches,
per kernel, and compares the results, output and every gradient, with the layer's direct path on that slice.
Where no tile size launches (16-column backward tiles serve k <= 3 only) or the comparison fails, the layer warns
once and computes that configuration on its other paths for the rest of the process (an error when the path is
forced on).

Where the path does not apply (`unsupported`), the layer keeps its other paths: kernels taller than one query
row (kq > 1: the query-axis padding would add a row halo to every tile), kernels wider than 7 (the halo
would fill the tiles), biases that depend on more than the distance (FIRE: no per-distance table), head dims
over 128.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import re
import warnings
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .fit import Fit

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
MAX_HEAD_DIM = 128
MAX_KERNEL_WIDTH = 7  # the backward's 32-column tiles own 32 − 8·(k//2) columns
MIN_TRITON = (3, 3)  # tl.gather


@functools.cache
def triton_problem() -> str | None:
    """None when a Triton recent enough for the kernels is installed (checked without importing it)."""
    if importlib.util.find_spec("triton") is None:
        return "Triton is not installed (pip install triton, or the project's 'gpu' extra)"
    version = importlib.metadata.version("triton")
    parts = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    if parts < MIN_TRITON:
        return f"Triton {version} is older than {'.'.join(map(str, MIN_TRITON))} (the kernels use tl.gather)"
    return None


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def unsupported(layer, q: torch.Tensor) -> str | None:
    """None when the fused path can compute this layer on q's dtype and shape, else the reason it cannot
    (the layer then keeps its other paths)."""
    processor, encoding = layer.processor, layer.pos
    if processor is None or processor.facts is None or not processor.facts.fused:  # its record (components.py)
        return "no score processor the fused kernels compute (a convolution of the DAPE family)"
    if processor.form_facts.fused_mode is None:
        return f"the form {processor.form!r}, which the fused kernels do not compute"
    if processor.kernel[0] != 1:
        return f"a {processor.kernel[0]}x{processor.kernel[1]} kernel (taller than one query row)"
    if processor.kernel[1] > MAX_KERNEL_WIDTH:
        return f"a 1x{processor.kernel[1]} kernel (wider than {MAX_KERNEL_WIDTH}: its halo would fill the tiles)"
    if not encoding.facts.fused:  # its record (dape_core/encodings/): a bias of more than the distance Δ
        return f"{type(encoding).__name__}'s bias depends on more than the distance"
    if q.dtype not in SUPPORTED_DTYPES:
        return f"dtype {q.dtype}"
    if q.shape[-1] > MAX_HEAD_DIM:
        return f"head dim {q.shape[-1]} > {MAX_HEAD_DIM}"
    return None


def cannot_run(device: torch.device) -> str | None:
    """None when the kernels can run on `device` here, else why not."""
    problem = triton_problem()
    if problem is not None:
        return problem
    if device.type == "cpu" and not interpreting():
        return "on CPU the kernels run only in Triton's interpreter (set TRITON_INTERPRET=1 before importing)"
    if device.type not in ("cpu", "cuda"):
        return f"no Triton kernels for device {device.type}"
    return None


def fused_attention(layer, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    forced: bool = True) -> torch.Tensor | None:
    """softmax(mask(processed logits)) · V for layer `layer` (a CausalSelfAttention), q, k, v: [B, H, T, d]
    (rotated already). Positions are 0..T−1 (the bias table is read off them). Where the kernels do not launch
    on this device (`fit`: no tile size fits it) or fail their self-check, a RuntimeError that says why when
    `forced`, else a warning (once per configuration) and None: the caller then computes the layer on its other
    paths."""
    from .launch import Spec, bias_table, pack_weights

    processor, encoding = layer.processor, layer.pos
    form = processor.form_facts  # its record: how z is built, whether B is added back
    spec = Spec(n_head=q.shape[1], head_dim=q.shape[3], channels=processor.conv_in.out_channels,
                kernel_width=processor.kernel[1], z_mode=form.fused_mode, residual_bias=form.adds_bias,
                has_bias=encoding.has_bias, tril=processor.tril, causal=layer.causal)
    table = bias_table(encoding, q.shape[2], q.device) if encoding.has_bias else None
    return _apply(layer, spec, forced, q, k, v, table, *pack_weights(processor, spec))


# What the kernels did for each configuration since `start_record()`: (spec, dtype, device, backward) -> its
# `fit.Fit` (the tiles they ran with and their self-check, or why they did not run). run_experiment reports it
# (ExperimentResult.attention_kernels).
_RECORD: dict[tuple, Fit] = {}
_WARNED: set[tuple] = set()  # the configurations whose fallback was warned of (once per process)


def start_record() -> None:
    _RECORD.clear()


def recorded_fits() -> dict:
    """What the fused kernels did since `start_record()`: (spec, dtype, device, backward) -> its `fit.Fit`."""
    return dict(_RECORD)


def recorded() -> str:
    """What the fused kernels did since `start_record()`, one clause per configuration, "" where none was tried
    (on CPU, without a processor, or turned off): which tiles they ran with and how their self-check went, or
    why they did not launch, or that they failed their self-check."""
    clauses = []
    for (spec, dtype, device, backward), fit in _RECORD.items():
        what = (f"{'training' if backward else 'evaluation'} ({str(dtype).removeprefix('torch.')}, "
                f"1x{spec.kernel_width}) on {device}")
        if fit.failed_check:
            clauses.append(f"{what}: failed its self-check: {fit.problem}; the block or direct path ran instead")
        elif not fit.launched:
            clauses.append(f"{what}: not launched, the block or direct path ran instead ({fit.problem})")
        elif fit.tiles is None:
            clauses.append(f"{what}: not used, the block or direct path ran instead ({fit.problem})")
        else:
            tiles = fit.tiles
            assert fit.check is not None, "kernels that ran passed their self-check (fit.py)"
            backward_tiles = f", {tiles.bwd_rows}x{tiles.bwd_cols} backward" if backward else ""
            clauses.append(f"{what}: fused, tiles {tiles.fwd_rows}x{tiles.fwd_cols} forward{backward_tiles}, "
                           f"self-check passed ({fit.check.summary()})")
    return "; ".join(clauses)


def _run(layer, spec, forced: bool, q, k, v, table, *weights):
    from .fit import fitted
    from .launch import FusedDapeAttention

    backward = torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in (q, k, v, table, *weights))
    fit = fitted(layer, spec, q, k, v, backward)
    key = (spec, q.dtype, q.device, backward)
    _RECORD[key] = fit
    if fit.tiles is None:
        where = torch.cuda.get_device_name(q.device) if q.is_cuda else str(q.device)
        kernels = f"the fused attention kernels ({'training' if backward else 'forward only'}, {spec}, {q.dtype})"
        message = (f"{kernels} failed their self-check on {where}: they differ from the direct path on a slice of "
                   f"this call's inputs, {fit.problem}" if fit.failed_check else
                   f"{kernels} do not launch on {where}: {fit.problem}" if not fit.launched else
                   f"{kernels} are not used on {where}: {fit.problem}")
        if forced:
            raise RuntimeError(message)
        if key not in _WARNED:
            _WARNED.add(key)
            warnings.warn(f"{message}. This configuration runs on the block or direct path instead for the rest of "
                          f"the process (slower; DAPE_FUSED_ATTENTION=0 chooses them without trying the kernels).",
                          RuntimeWarning)
        return None
    return FusedDapeAttention.apply(spec, fit.tiles, q, k, v, table, *weights)


_OUTSIDE_GRAPHS = None


def _apply(layer, spec, forced, q, k, v, table, *weights):
    """Outside torch.compile's graphs: the compiled model calls the kernels as they are. The wrapper is made on
    first use, not at import: `torch.compiler.disable` imports torch._dynamo (4 s on a busy CPU), which a process
    that only builds and evaluates models never needs (training loads it anyway: torch's AdamW imports it)."""
    global _OUTSIDE_GRAPHS
    if _OUTSIDE_GRAPHS is None:
        _OUTSIDE_GRAPHS = torch.compiler.disable(_run)
    return _OUTSIDE_GRAPHS(layer, spec, forced, q, k, v, table, *weights)

"""Which tile sizes the fused kernels run with on this device, found once per kernel configuration on its first
call. Whether a Triton kernel launches depends on the GPU (shared memory per block: 227 KB on sm_90, 163 KB on
sm_80, 99 KB on sm_86/sm_89, 64 KB on sm_75) and is known only once it is compiled and loaded, so the first
call runs the forward (and, where gradients are needed, the backward) on a short slice of its own inputs with
each of `launch.tile_choices` in turn and keeps the first that launches. When none does, the reason is kept
and the layer computes that configuration on its other paths (`dape_core.fused.fused_attention` says so once).
"""

from __future__ import annotations

import torch
from triton.compiler.errors import CompilationError
from triton.runtime.errors import OutOfResources

from . import launch
from .launch import Spec, Tiles

try:  # Triton's common base class (PTXASError and the rest), where this Triton has one
    from triton.errors import TritonError as _KernelError
except ImportError:
    _KernelError = (CompilationError, OutOfResources)

PROBE_LENGTH = 64  # rows of the slice the kernels are tried on: a few tiles, a fraction of a second to compile

_FITTED: dict[tuple, Tiles | str] = {}


def fitted_tiles(spec: Spec, q, k, v, table, weights, backward: bool) -> Tiles | str:
    """The tiles to run this configuration with on q's device, or why the kernels do not run there. `backward`:
    whether the backward kernel must run too (training); without it only the forward is tried."""
    choices = launch.tile_choices(spec.kernel_width)
    key = (spec, q.dtype, q.device, backward, tuple(choices))
    if key not in _FITTED:
        _FITTED[key] = _first_that_runs(spec, choices, q, k, v, table, weights, backward)
    return _FITTED[key]


def _first_that_runs(spec: Spec, choices: list[Tiles], q, k, v, table, weights, backward: bool) -> Tiles | str:
    length = min(q.shape[2], PROBE_LENGTH)
    q, k, v = (x[:1, :, :length].detach() for x in (q, k, v))
    table = table[:, :length].detach().contiguous() if table is not None else None
    weights = tuple(w.detach() for w in weights)
    width = spec.kernel_width
    failures = []
    with torch.no_grad():
        forward = _first(choices, lambda t: launch.forward_fits(t, width), "forward", failures,
                         lambda t: launch.run_forward(spec, t, q, k, v, table, weights))
        if forward is None:
            return "; ".join(failures)
        tiles, (out, lse) = forward
        if not backward:
            return tiles
        d_out = torch.ones_like(out)
        found = _first(choices, lambda t: launch.backward_fits(t, width), "backward", failures,
                       lambda t: launch.run_backward(spec, _with_backward_of(tiles, t), q, k, v, table, weights,
                                                     out, lse, d_out))
        if found is None:
            return "; ".join(failures)
        return _with_backward_of(tiles, found[0])


def _first(choices, fits, kernel: str, failures: list[str], run):
    """(the first choice that fits and runs, its result), or None, adding each failure's reason to `failures`."""
    tried = set()
    for tiles in choices:
        size = (tiles.fwd_rows, tiles.fwd_cols) if kernel == "forward" else (tiles.bwd_rows, tiles.bwd_cols)
        if not fits(tiles) or (size, tiles.warps) in tried:
            continue
        tried.add((size, tiles.warps))
        try:
            return tiles, run(tiles)
        except _KernelError as error:  # out of shared memory or registers, ptxas, an unsupported construct
            failures.append(f"{kernel} {size[0]}x{size[1]} tiles: {type(error).__name__}: {error}")
    if not tried:
        failures.append(f"no {kernel} tiles of {[str(t) for t in choices]} are wide enough for this kernel")
    return None


def _with_backward_of(tiles: Tiles, other: Tiles) -> Tiles:
    return Tiles(tiles.fwd_rows, tiles.fwd_cols, other.bwd_rows, other.bwd_cols, tiles.warps)

"""What the fused kernels do for each kernel configuration, found once per process on its first call: which tile
sizes they run with on this device, and whether they compute what the reference formulation does there.

Whether a Triton kernel launches depends on the GPU (shared memory per block: 227 KB on sm_90, 163 KB on sm_80,
99 KB on sm_86/sm_89, 64 KB on sm_75) and is known only once it is compiled and loaded, so the first call runs
the forward (and, where gradients are needed, the backward) on a short slice of its own inputs with each of
`launch.tile_choices` in turn and keeps the first that launches. The results of those launches are then
compared with the layer's direct path on the same slice (`selfcheck`: the output and every gradient, against a
tolerance from the direct path's own error in that dtype). When no tile size launches, or the kernels fail the
comparison, the reason is kept and the layer computes that configuration on its other paths for the rest of the
process (`dape_core.fused.fused_attention` says so once; an error where the path is forced on).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from triton.compiler.errors import CompilationError
from triton.runtime.errors import OutOfResources

# The modules themselves, not the package (whose `_run` imports this one): the tests patch their attributes.
import dape_core.fused.launch as launch
import dape_core.fused.selfcheck as selfcheck

from .launch import Spec, Tiles

try:  # Triton's common base class (PTXASError and the rest), where this Triton has one
    from triton.errors import TritonError as _KernelError
except ImportError:
    _KernelError = (CompilationError, OutOfResources)

CHECK_ERROR = "their self-check could not run"
PROBE_LENGTH = 64  # rows of the slice the kernels are tried on: a few tiles, a fraction of a second to compile


@dataclass(frozen=True)
class Fit:
    """What the first call of a configuration found. `tiles`: what the kernels run with, None where this
    configuration runs on the layer's other paths, `problem` saying why (no tile size launched, or the self-check
    failed). `check`: the self-check (None where the kernels did not launch). `seconds`: the whole first-call
    probe, compilation, launches and self-check included."""

    tiles: Tiles | None
    problem: str = ""
    check: selfcheck.Check | None = None
    seconds: float = 0.0

    @property
    def failed_check(self) -> bool:
        return self.check is not None and not self.check.passed

    @property
    def launched(self) -> bool:
        """Whether the kernels launched (with tiles None: they failed, or could not run, their self-check)."""
        return self.tiles is not None or self.check is not None or self.problem.startswith(CHECK_ERROR)


_FITTED: dict[tuple, Fit] = {}


def fitted(layer, spec: Spec, q, k, v, backward: bool) -> Fit:
    """How this configuration runs on q's device (probed and checked on the first call). `backward`: whether the
    backward kernel must run too (training); without it only the forward is tried and checked."""
    choices = launch.tile_choices(spec.kernel_width)
    key = (spec, q.dtype, q.device, backward, torch.is_autocast_enabled(q.device.type), tuple(choices))
    if key not in _FITTED:
        start = time.perf_counter()
        fit = _first_that_runs(layer, spec, choices, q, k, v, backward)
        _FITTED[key] = Fit(fit.tiles, fit.problem, fit.check, time.perf_counter() - start)
    return _FITTED[key]


def _first_that_runs(layer, spec: Spec, choices: list[Tiles], q, k, v, backward: bool) -> Fit:
    piece = selfcheck.Slice(layer, q, k, v, min(q.shape[2], PROBE_LENGTH))
    table, weights, leaves = piece.kernel_inputs(spec, backward)
    q, k, v = piece.q, piece.k, piece.v
    launched = table.detach() if table is not None else None, tuple(w.detach() for w in weights)
    width = spec.kernel_width
    failures: list[str] = []
    with torch.no_grad():
        forward = _first(choices, lambda t: launch.forward_fits(t, width), "forward", failures,
                         lambda t: launch.run_forward(spec, t, q, k, v, *launched))
        if forward is None:
            return Fit(None, "; ".join(failures))
        tiles, (out, lse) = forward
        if backward:
            found = _first(choices, lambda t: launch.backward_fits(t, width), "backward", failures,
                           lambda t: launch.run_backward(spec, _with_backward_of(tiles, t), q, k, v, *launched,
                                                         out, lse, piece.d_out))
            if found is None:
                return Fit(None, "; ".join(failures))
            tiles, grads = _with_backward_of(tiles, found[0]), found[1]
    try:
        gradients = piece.fused_gradients(table, weights, leaves, grads) if backward else None
        check = selfcheck.check_slice(piece, q.dtype, out, gradients)
    except Exception as error:  # noqa: BLE001 - unchecked kernels are not used; the reason is reported
        return Fit(None, f"{CHECK_ERROR}: {type(error).__name__}: {error}")
    return Fit(tiles if check.passed else None, "" if check.passed else check.describe(), check)


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

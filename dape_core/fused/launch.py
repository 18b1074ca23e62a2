"""Host side of the fused path: the kernels' inputs (packed weights, the bias table), tile sizes, launches, and
the autograd function that ties the Triton forward to the chunked backward (see `__init__.py`)."""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch.nn import functional as F

from .kernels import dape_backward_kernel, dape_forward_kernel

# The backward's dS and softmax-weight maps of one chunk of rows ([B, H, rows, keys] each) stay under this.
BACKWARD_CHUNK_BYTES = 2**30
TILES_ENV = "DAPE_FUSED_TILES"  # "fwd_rows,fwd_cols,bwd_rows,bwd_cols,warps": tile sizes for tuning on a GPU
TRITON_DTYPES = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float32: tl.float32,
                 torch.float64: tl.float64}
# How the kernels build z (Z_MODE) is each form's `fused_mode` (dape_core/processors/forms.py).


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def _pow2(n: int, at_least: int = 16) -> int:
    return max(at_least, triton.next_power_of_2(n))


@dataclass(frozen=True)
class Tiles:
    """Query rows and key columns of a tile, forward and backward, and warps per program. A tile owns
    `cols − 4·(k//2)` key columns in the forward and `cols − 8·(k//2)` in the backward (the halo)."""

    fwd_rows: int
    fwd_cols: int
    bwd_rows: int
    bwd_cols: int
    warps: int


def tile_choices(kernel_width: int) -> list[Tiles]:
    """The tile sizes to try, best first; `fit.fitted` keeps, for each kernel, the first that compiles
    and launches on the device. Not yet timed on a GPU (tests/benchmarks/gpu_check.sh tiles does that); chosen
    from what the kernels need, compiled offline (tests/benchmarks/fused_resources.py: bfloat16, k = 3, 12
    heads padded to 16, d = 64, D = 32, 8 warps; shared memory per program, spilled bytes per thread):

        tile            forward 16x16   forward 16x32   backward 16x16   backward 16x32
        shared memory   81 KB           121 KB          96 KB            128 KB
        spills sm_90    292 B           1204 B          1308 B           4768 B

    (16 x 64 tiles: 206 KB forward, 512 KB backward, over the 227 KB an sm_90 block may have.) So forward tiles
    of 16 columns up to k = 3 (owning 12 of them for k = 3) and 32 beyond; backward tiles of 32 columns
    (owning 32 − 8·(k//2): 24 for k = 3, only 8 for k = 7, where the halo dominates the cost). GPUs with
    99 KB per block (sm_86, sm_89: A10, L4, L40S, RTX 30xx/40xx) cannot launch the 32-column tiles, so
    16-column tiles come second: they fit there, but a 16-column backward tile serves k <= 3 only. Under the
    interpreter, whose cost is per operation rather than per element, large tiles (few of them).
    `DAPE_FUSED_TILES` sets the only choice."""
    half = kernel_width // 2
    override = os.environ.get(TILES_ENV)
    if override:
        fwd_rows, fwd_cols, bwd_rows, bwd_cols, warps = (int(x) for x in override.split(","))
        tiles = Tiles(fwd_rows, fwd_cols, bwd_rows, bwd_cols, warps)
        if tiles.fwd_cols <= 4 * half or tiles.bwd_cols <= 8 * half:
            raise ValueError(f"{TILES_ENV}={override}: tiles too narrow for a 1x{kernel_width} kernel (a tile "
                             f"needs more than {4 * half} columns forward and {8 * half} backward)")
        return [tiles]
    if interpreting():
        return [Tiles(32, 64, 32, 64, 4)]
    return [Tiles(16, 16 if kernel_width <= 3 else 32, 16, 32, 8), Tiles(16, 16, 16, 16, 8)]


# Where ptxas, left to itself, allocates too few registers: on sm_80 it gave the backward kernel 32 registers and
# 43 KB of spill stores per thread (16 x 32 tiles; 5.8 KB for 16 x 16), and with the cap below 255 and 7.1 KB
# (2.3 KB). Elsewhere the cap made its choices worse (sm_90 backward 16 x 32: 4.8 -> 5.5 KB; sm_86 forward
# 16 x 16: 172 -> 432 B), so it applies on sm_80 only. Measured with tests/benchmarks/fused_resources.py.
REGISTER_CAPPED = {(8, 0)}


def compile_options(warps: int, capability: tuple[int, int] | None) -> dict:
    """The kernels' compile options on a GPU of this compute capability (None: the interpreter): one stage, and
    on REGISTER_CAPPED GPUs the registers per thread capped at what one program of `warps` warps may have (64K
    per SM, at most 255)."""
    options = {"num_warps": warps, "num_stages": 1}
    if capability in REGISTER_CAPPED:
        options["maxnreg"] = min(255, 65536 // (32 * warps))
    return options


@functools.cache
def _capability(device: torch.device) -> tuple[int, int] | None:
    return torch.cuda.get_device_capability(device) if device.type == "cuda" else None


def forward_fits(tiles: Tiles, kernel_width: int) -> bool:
    """Whether a forward tile owns at least one column: it computes 2·(k//2) halo columns each side."""
    return tiles.fwd_cols > 4 * (kernel_width // 2)


def backward_fits(tiles: Tiles, kernel_width: int) -> bool:
    """Whether a backward tile owns at least one column: 4·(k//2) halo columns each side."""
    return tiles.bwd_cols > 8 * (kernel_width // 2)


@dataclass(frozen=True)
class Spec:
    """Everything the kernels are specialised on, for one layer and input dtype."""

    n_head: int
    head_dim: int
    channels: int  # D
    kernel_width: int
    z_mode: int
    residual_bias: bool
    has_bias: bool
    tril: bool
    causal: bool

    @property
    def heads_p(self) -> int:
        return _pow2(self.n_head)

    @property
    def channels_p(self) -> int:
        return _pow2(self.channels)

    def constexprs(self, dtype: torch.dtype) -> dict:
        return dict(HP=self.heads_p, DH=_pow2(self.head_dim), DP=self.channels_p, KW=self.kernel_width,
                    W=self.kernel_width // 2, Z_MODE=self.z_mode, RES_B=self.residual_bias, HAS_BIAS=self.has_bias,
                    TRIL=self.tril, CAUSAL=self.causal, DOT=_product_dtype(dtype),
                    ACC=tl.float64 if dtype == torch.float64 else tl.float32, PREC=_precision(dtype))


def _product_dtype(dtype: torch.dtype):
    """The matrix products' operand type: the inputs'. Triton's interpreter multiplies bfloat16 matrices as
    their raw bits, so under the interpreter bfloat16 products run in float32 (the tests of real bfloat16
    products run on a GPU: tests/benchmarks/gpu_check.sh)."""
    if dtype == torch.bfloat16 and interpreting():
        return tl.float32
    return TRITON_DTYPES[dtype]


def _precision(dtype: torch.dtype) -> str:
    """float32 products as PyTorch's matmuls would do them: TF32 only where PyTorch allows it."""
    if dtype == torch.float32 and not interpreting() and torch.backends.cuda.matmul.allow_tf32:
        return "tf32"
    return "ieee"


def accumulator_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


# ---------------------------------------------------------------- inputs
def pack_weights(processor, spec: Spec) -> tuple[torch.Tensor, ...]:
    """The convolutions as the kernels read them, differentiably (autograd maps the gradients back):
    w_in_s / w_in_b [k, HP, DP] (the first convolution's taps on the S part / the B part of z; a zero
    placeholder where the form has no such part), b_in [DP], w_out [k, DP, HP], b_out [HP]."""
    heads, hp, dp = spec.n_head, spec.heads_p, spec.channels_p
    weight = processor.conv_in.weight[:, :, 0, :]  # [D, C, k]

    def taps(part: torch.Tensor, rows: int, cols: int) -> torch.Tensor:  # [cols', rows', k] -> [k, rows, cols]
        part = part.permute(2, 1, 0)
        return F.pad(part, (0, cols - part.shape[2], 0, rows - part.shape[1]))

    placeholder = weight.new_zeros(spec.kernel_width, hp, dp)
    if spec.z_mode == 0:
        w_s, w_b = taps(weight[:, :heads], hp, dp), taps(weight[:, heads:], hp, dp)
    elif spec.z_mode == 2:
        w_s, w_b = placeholder, taps(weight, hp, dp)
    else:
        w_s, w_b = taps(weight, hp, dp), placeholder
    b_in = F.pad(processor.conv_in.bias, (0, dp - spec.channels))
    w_out = taps(processor.conv_out.weight[:, :, 0, :], dp, hp)
    b_out = F.pad(processor.conv_out.bias, (0, hp - heads))
    return w_s.contiguous(), w_b.contiguous(), b_in.contiguous(), w_out.contiguous(), b_out.contiguous()


def bias_table(encoding, length: int, device: torch.device) -> torch.Tensor:
    """[H, T]: the bias at distance 0..T−1, read off the last query row. Exact for encodings whose bias
    depends on the distance only (`PositionEncoding.toeplitz`); differentiable in their parameters."""
    positions = torch.arange(length, device=device)
    return encoding.bias(positions[-1:], positions)[:, 0].flip(-1).contiguous()


# ---------------------------------------------------------------- launches
def _strides(x: torch.Tensor) -> tuple[int, ...]:
    return tuple(x.stride())


def run_forward(spec: Spec, tiles: Tiles, q, k, v, table, weights) -> tuple[torch.Tensor, torch.Tensor]:
    """Output [B, H, T, d] (a view of a [B, T, H, d] tensor, so the layer's reshape back is free) and the
    log-sum-exp of each row [B, H, T] (accumulator dtype)."""
    batch, heads, length, head_dim = q.shape
    out = torch.empty(batch, length, heads, head_dim, dtype=q.dtype, device=q.device).transpose(1, 2)
    lse = torch.empty(batch, heads, length, dtype=accumulator_dtype(q.dtype), device=q.device)
    half = spec.kernel_width // 2
    rows, cols = tiles.fwd_rows, tiles.fwd_cols
    grid = (triton.cdiv(length, rows), batch)
    dape_forward_kernel[grid](
        q, k, v, table if table is not None else lse, *weights, out, lse,
        *_strides(q), *_strides(k), *_strides(v), *_strides(out), length, heads, head_dim, 1.0 / math.sqrt(head_dim),
        M=rows, NZ=cols, P=rows * cols, OWN=cols - 4 * half, **spec.constexprs(q.dtype),
        **compile_options(tiles.warps, _capability(q.device)))
    return out, lse


def chunk_rows(spec: Spec, batch: int, length: int, element_size: int, tile_rows: int) -> int:
    """Rows per backward chunk: its two [B, H, rows, T] maps within BACKWARD_CHUNK_BYTES, a multiple of the tile."""
    per_row = 2 * batch * spec.n_head * length * element_size
    rows = max(tile_rows, BACKWARD_CHUNK_BYTES // per_row // tile_rows * tile_rows)
    return min(rows, triton.cdiv(length, tile_rows) * tile_rows)


def _weight_gradient_slots(spec: Spec, programs: int, dtype: torch.dtype, device) -> dict[str, torch.Tensor]:
    """One slot per program for each packed weight's gradient (summed on the host: no contention, and the
    sum's order does not depend on scheduling)."""
    hp, dp, kw = spec.heads_p, spec.channels_p, spec.kernel_width
    shapes = {"w_in_s": (kw, hp, dp), "w_in_b": (kw, hp, dp), "b_in": (dp,), "w_out": (kw, dp, hp), "b_out": (hp,)}
    return {name: torch.zeros(programs, *shape, dtype=dtype, device=device) for name, shape in shapes.items()}


def run_backward(spec: Spec, tiles: Tiles, q, k, v, table, weights, out, lse, d_out):
    """Gradients of q, k, v, the table and the packed weights. Per chunk of rows, the kernel writes dS and the
    softmax weights of those rows; dq, dk, dv are matrix products of those maps with k, q and dO."""
    batch, heads, length, head_dim = q.shape
    acc, device, half = accumulator_dtype(q.dtype), q.device, spec.kernel_width // 2
    delta = (d_out.to(acc) * out.to(acc)).sum(-1).contiguous()  # Σ_d dO·O per row: the softmax backward's shift
    scale = 1.0 / math.sqrt(head_dim)
    rows = chunk_rows(spec, batch, length, q.element_size(), tiles.bwd_rows)
    slots = _weight_gradient_slots(spec, triton.cdiv(rows, tiles.bwd_rows) * batch, acc, device)
    d_table = torch.zeros(heads, length, dtype=acc, device=device)
    dq = torch.empty_like(q)
    dk, dv = torch.zeros(q.shape, dtype=acc, device=device), torch.zeros(q.shape, dtype=acc, device=device)
    for start in range(0, length, rows):
        stop = min(length, start + rows)
        keys = length if not spec.causal else min(length, stop + (0 if spec.tril else 2 * half))
        d_scores = torch.zeros(batch, heads, stop - start, keys, dtype=q.dtype, device=device)
        probs = torch.zeros_like(d_scores)
        dape_backward_kernel[(triton.cdiv(stop - start, tiles.bwd_rows), batch)](
            q, k, v, d_out, lse, delta, table if table is not None else lse, *weights, d_scores, probs, d_table,
            *slots.values(), *_strides(q), *_strides(k), *_strides(v), *_strides(d_out), length, heads, head_dim,
            scale, start, stop - start, keys, M=tiles.bwd_rows, NZ=tiles.bwd_cols, P=tiles.bwd_rows * tiles.bwd_cols,
            OWN=tiles.bwd_cols - 8 * half, NW=triton.next_power_of_2(tiles.bwd_rows + tiles.bwd_cols - 1),
            **spec.constexprs(q.dtype), **compile_options(tiles.warps, _capability(q.device)))
        with torch.autocast(device.type, enabled=False):
            dq[:, :, start:stop] = (d_scores @ k[:, :, :keys]).mul_(scale)
            dk[:, :, :keys] += (d_scores.transpose(-2, -1) @ q[:, :, start:stop]).to(acc).mul_(scale)
            dv[:, :, :keys] += (probs.transpose(-2, -1) @ d_out[:, :, start:stop].to(q.dtype)).to(acc)
    weight_grads = tuple(slot.sum(0).to(w.dtype) for slot, w in zip(slots.values(), weights))
    table_grad = d_table.to(table.dtype) if table is not None else None
    return dq, dk.to(k.dtype), dv.to(v.dtype), table_grad, weight_grads


class FusedDapeAttention(torch.autograd.Function):
    """softmax(mask(S + B + f(z))) · V with the processor f fused into the kernels; saves q, k, v, the output and
    its log-sum-exp (nothing of size T²)."""

    @staticmethod
    def forward(ctx, spec: Spec, tiles: Tiles, q, k, v, table, w_in_s, w_in_b, b_in, w_out, b_out):
        weights = (w_in_s, w_in_b, b_in, w_out, b_out)
        out, lse = run_forward(spec, tiles, q, k, v, table, weights)
        ctx.spec, ctx.tiles = spec, tiles
        ctx.save_for_backward(q, k, v, table, *weights, out, lse)
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, table, *weights, out, lse = ctx.saved_tensors
        dq, dk, dv, d_table, weight_grads = run_backward(ctx.spec, ctx.tiles, q, k, v, table, tuple(weights), out,
                                                         lse, d_out)
        return (None, None, dq, dk, dv, d_table, *weight_grads)

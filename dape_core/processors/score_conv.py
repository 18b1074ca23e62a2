"""The score processor's two convolutions as a few large matrix products (CPU), forward and backward.

`ConvScoreProcessor` (dape.py) computes f(z) = Conv_out(LeakyReLU(Conv_in(z))) over the [B, C, Tq, Tk]
score map. PyTorch's CPU convolution runs these narrow shapes (C_in = 2H, D = 32, H output channels) at a
fraction of its matrix-product speed, slowest in backward and in Conv_out, whose output has only H
channels (issue 45: 22 GFLOP/s against 80 for the linear layers). Here both run as batched GEMMs over the
channels-first map, N = Tq·Tk entries per sequence, in the one autograd function `ConvPair`:

- Conv_in reads kq·kk·C_in values per entry, the input's taps: an im2col matrix `cols` [B, taps·C_in + 1, N]
  (each tap a shifted copy of z, zero past the map's edges; the last row ones, so that the bias is a column
  of the weight matrix), written straight from the parts of z with the `tril` applied, so z itself is never
  materialised. hidden = W_in [D, taps·C_in + 1] @ cols, LeakyReLU in place.
- Conv_out has H ≪ D output channels, so its taps are taken on the output side instead of expanding the
  D-channel hidden map: Y = W_out [taps·H, D] @ hidden, and f is the sum of Y's taps, each shifted back
  (Y's values whose shifted place lies past the edge are dropped, the zero padding of the convolution).
- Backward is the transpose of each step: the output's gradient taken at each tap (the im2col of an
  H-channel map), two GEMMs for Conv_out's weight and hidden gradients, LeakyReLU's backward from its output,
  two GEMMs for Conv_in's weight and cols gradients, and the cols gradient summed back over the taps (col2im)
  into the gradient of each part of z, masked by the `tril`.

A causal 1 x k map (the `tril`) is computed in row blocks (`_blocks`), each over its keys up to 3·(kk//2)
past its last non-zero key: beyond, z is zero, the hidden map LeakyReLU(b_in) and the output one value per
head and key (`_far_logits`), filled in, and its gradient reaches b_out, W_out and b_in only (`backward`).
On a training map (T = 64, 1x3) that skips about a third of the multiply-adds. Without gradients (evaluation)
blocks are also cut to BLOCK_BYTES, the same values at every key attention keeps (tests/test_score_conv.py).

Kernel geometry, as `ConvScoreProcessor` states it: a tap (r, c) of a kq x kk kernel reads row i − (kq − 1) + r
and key j − kk//2 + c of its input (rows padded on the past side only, keys centred). Same function as the
convolutions; only the float32 summation order differs (docs/method.md §4.5: float64 agrees with the
convolutions to rounding, tests/test_score_conv.py).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch

from ..allocator import MMAP_THRESHOLD_BYTES
from .base import convolutions as convolutions  # re-exported: the switch is base.py's
from .base import gemm_path

SLOPE = 0.01  # LeakyReLU's negative slope (docs/method.md §3)
# Without gradients (evaluation) a block's largest map stays below this: well under glibc's largest mmap
# threshold (allocator.py), so that it is reused from the heap rather than mapped and faulted in anew for every
# block (a 1x7 block of 8 sequences x 32 rows x 1,024 keys has a 60 MB im2col matrix), and nearer the caches
# (measured: L=1024 evaluations of 1x5 and 1x7 about 15% faster at 8 MiB than at 16 or 4; 1x3 unchanged).
BLOCK_BYTES = MMAP_THRESHOLD_BYTES // 4  # 8 MiB


def applies(scores: torch.Tensor) -> bool:
    """Whether `conv_pair` computes this call: on CPU, outside autocast (a convolution there keeps its
    PyTorch kernel: cuDNN runs these shapes well, and autocast picks each op's precision), and outside
    `convolutions()` (base.py)."""
    return gemm_path() and scores.device.type == "cpu" and not torch.is_autocast_enabled("cpu")


def conv_pair(keep: torch.Tensor | None, batch: int, conv_in: torch.nn.Conv2d, conv_out: torch.nn.Conv2d,
              parts: list[torch.Tensor]) -> torch.Tensor:
    """f(tril(concat(parts))) = Conv_out(LeakyReLU(Conv_in(z))) as [B, H, Tq, Tk] (contiguous, a new tensor).

    `parts`: [B, h, Tq, Tk] maps, or a batch-free [h, Tq, Tk] one (the bias), concatenated over channels;
    `keep`: the float lower-triangle mask [Tq, Tk], or None (no `tril`)."""
    saves = torch.is_grad_enabled() and any(t.requires_grad for t in (conv_in.weight, conv_out.weight, *parts))
    return ConvPair.apply(keep, batch, saves, conv_in.weight, conv_in.bias, conv_out.weight, conv_out.bias, *parts)


def _shift(offset: int, size: int) -> tuple[slice, slice]:
    """(where, from where) along one axis for a tap reading index i + offset: out[where] = in[from where]."""
    offset = max(-size, min(size, offset))
    if offset >= 0:
        return slice(0, size - offset), slice(offset, size)
    return slice(-offset, size), slice(0, size + offset)


Tap = tuple[tuple[slice, slice], tuple[slice, slice]]


@functools.lru_cache(maxsize=256)
def _taps(rows: int, cols: int, length: int, keys: int) -> list[Tap]:
    """Per tap (r, c), row-major: ((rows, keys) it writes, (rows, keys) it reads) for a map [length, keys]."""
    taps = []
    for r in range(rows):
        row_to, row_from = _shift(r - (rows - 1), length)
        for c in range(cols):
            key_to, key_from = _shift(c - cols // 2, keys)
            taps.append(((row_to, key_to), (row_from, key_from)))
    return taps


def _zero_border(target: torch.Tensor, to: tuple[slice, slice]) -> None:
    """Zero what a tap's shifted copy leaves unwritten in `target` [..., Tq, Tk]: rows and keys outside `to`."""
    rows, keys = to
    length, width = target.shape[-2:]
    if rows.start > 0:
        target[..., : rows.start, :].zero_()
    if rows.stop < length:
        target[..., rows.stop :, :].zero_()
    if keys.start > 0:
        target[..., rows, : keys.start].zero_()
    if keys.stop < width:
        target[..., rows, keys.stop :].zero_()


class Block(NamedTuple):
    """Rows start..stop−1 of the map, computed over its first `width` keys; the first `exact` of them are
    the convolutions' values, the rest (past the `tril`'s last non-zero key and both kernels' reach) one
    value per head and key (`_far_logits`)."""

    start: int
    stop: int
    width: int
    exact: int


def _blocks(keep: torch.Tensor | None, kernel: tuple[int, int], length: int, keys: int,
            most_rows: int | None = None) -> list[Block]:
    """Row blocks that skip the causal map's upper triangle. Past the last non-zero key n of a block's z
    (the `tril`), the hidden map is LeakyReLU(b_in) from key n + kk//2 on, and the output one value per head
    from n + 2·(kk//2) on, so a block computes keys up to n + 3·(kk//2). One block over every key without a
    `tril` (leak, a bidirectional model) or with a kernel taller than one row (its zero row padding makes the
    top rows differ). `most_rows`: at most this many rows a block (`_most_rows`, without gradients)."""
    rows, cols = kernel
    if keep is None or rows > 1:
        return [Block(0, length, keys, keys)]
    half = cols // 2
    size = max(16, -(-length // 4))  # 4 blocks at most: each costs a few dozen op calls
    if most_rows is not None:
        size = min(size, most_rows)
    blocks = []
    for start in range(0, length, size):
        stop = min(length, start + size)
        nonzero = keep[start:stop].any(0).nonzero()
        last = int(nonzero.max()) + 1 if nonzero.numel() else 0
        width = min(keys, last + 3 * half)
        blocks.append(Block(start, stop, width, keys if width == keys else width - half))
    return blocks


def _most_rows(batch: int, channels: int, keys: int, element_size: int) -> int:
    """Rows per block that keep its largest map (`channels` per entry: the im2col matrix, the hidden map or
    Conv_out's taps) within BLOCK_BYTES. Only without gradients: the weight gradients sum over a block's
    entries, so training keeps its blocks whatever their size; without them a block's values at the keys that
    attention keeps do not depend on its rows (tests/test_score_conv.py)."""
    return max(1, BLOCK_BYTES // (batch * channels * keys * element_size))


def _far_logits(b_in: torch.Tensor, w_out: torch.Tensor, b_out: torch.Tensor, keys: int) -> torch.Tensor:
    """[H, keys]: the output where every hidden value the kernel reads is LeakyReLU(b_in) (z zero around it),
    by key: b_out + the taps that stay inside the map (all but the last kk//2 keys read all taps)."""
    hidden = torch.nn.functional.leaky_relu(b_in, SLOPE)
    width = w_out.shape[-1]
    per_tap = torch.einsum("hdc,d->ch", w_out[:, :, 0, :], hidden)  # [kk, H]
    far = b_out[:, None].expand(-1, keys).clone()
    for c in range(width):
        reach = keys - max(0, c - width // 2)  # keys whose tap c reads a hidden value inside the map
        far[:, :reach] += per_tap[c][:, None]
    return far


class ConvPair(torch.autograd.Function):
    """f(tril(concat(parts))) with its backward, as batched GEMMs by row block (see the module doc)."""

    @staticmethod
    def forward(ctx, keep, batch, saves, w_in, b_in, w_out, b_out, *parts):
        """`saves`: keep each block's maps for the backward (without gradients each block's go at once)."""
        first = parts[0]
        length, keys = first.shape[-2:]
        hidden_channels, channels, rows, width = w_in.shape
        heads = w_out.shape[0]
        widest = max(rows * width * channels + 1, hidden_channels, rows * width * heads)
        most = None if saves else _most_rows(batch, widest, keys, first.element_size())
        blocks = _blocks(keep, (rows, width), length, keys, most)
        weight_in = torch.cat([w_in.permute(0, 2, 3, 1).reshape(hidden_channels, -1), b_in[:, None]], dim=1)
        weight_out = w_out.permute(2, 3, 0, 1).reshape(rows * width * heads, hidden_channels)
        out = first.new_empty((batch, heads, length, keys))
        far = None
        saved: list[torch.Tensor] = []
        for block in blocks:
            cols = _im2col(parts, keep, batch, block, (rows, width), channels)
            hidden = torch.bmm(weight_in.expand(batch, -1, -1), cols)  # [B, D, R·W]
            torch.nn.functional.leaky_relu_(hidden, SLOPE)
            spread = torch.bmm(weight_out.expand(batch, -1, -1), hidden)  # [B, taps·H, R·W]
            _sum_taps(spread, out[:, :, block.start : block.stop], block, (rows, width), heads, b_out)
            if block.exact < keys:
                far = _far_logits(b_in, w_out, b_out, keys) if far is None else far
                out[:, :, block.start : block.stop, block.exact :] = far[:, None, block.exact :]
            if saves:
                saved += [cols, hidden]
        ctx.save_for_backward(keep, weight_in, weight_out, b_in, w_out, *saved)
        ctx.blocks = blocks
        ctx.geometry = (batch, channels, rows, width, heads, length, keys)
        ctx.shapes = [part.shape for part in parts]
        return out

    @staticmethod
    def backward(ctx, grad):
        keep, weight_in, weight_out, b_in, w_out, *saved = ctx.saved_tensors
        batch, channels, rows, width, heads, length, keys = ctx.geometry
        hidden_channels = weight_in.shape[0]
        grad = grad.contiguous()
        want_in = ctx.needs_input_grad[3] or ctx.needs_input_grad[4]
        want_parts = any(ctx.needs_input_grad[7:])
        grad_weight_in = weight_in.new_zeros(weight_in.shape)
        grad_weight_out = weight_out.new_zeros(weight_out.shape)
        grad_z = grad.new_empty((batch, channels, length, keys)) if want_parts else None
        far_sums = grad.new_zeros((heads, keys))  # gradient summed over the far part, by head and key
        for index, block in enumerate(ctx.blocks):
            cols, hidden = saved[2 * index], saved[2 * index + 1]
            grad_spread = _spread_grad(grad[:, :, block.start : block.stop], block, (rows, width), heads)
            grad_weight_out += torch.bmm(grad_spread, hidden.transpose(1, 2)).sum(0)
            grad_hidden = torch.bmm(weight_out.t().expand(batch, -1, -1), grad_spread)  # [B, D, R·W]
            torch.ops.aten.leaky_relu_backward.grad_input(grad_hidden, hidden, SLOPE, True, grad_input=grad_hidden)
            if want_in:
                grad_weight_in += torch.bmm(grad_hidden, cols.transpose(1, 2)).sum(0)
            if grad_z is not None:
                grad_cols = torch.bmm(weight_in[:, :-1].t().expand(batch, -1, -1), grad_hidden)
                region = grad_z[:, :, block.start : block.stop]
                _col2im(grad_cols, region[..., : block.width], block, (rows, width), channels)
                region[..., block.width :].zero_()  # z is zero there (the `tril`): no gradient reaches it
                if keep is not None:
                    region[..., : block.width].mul_(keep[block.start : block.stop, : block.width])
            if block.exact < keys:
                far_sums[:, block.exact :] += grad[:, :, block.start : block.stop, block.exact :].sum((0, 2))
        grad_w_out = grad_weight_out.view(rows, width, heads, hidden_channels).permute(2, 3, 0, 1).contiguous()
        grad_b_in = grad_weight_in[:, -1].clone()
        if far_sums.any():  # the far part's values: b_out + Σ_c W_out[c] · LeakyReLU(b_in)
            half = width // 2
            taps = torch.stack([far_sums[:, : keys - max(0, c - half)].sum(1) for c in range(width)], dim=1)
            hidden = torch.nn.functional.leaky_relu(b_in, SLOPE)
            grad_w_out[:, :, 0, :] += torch.einsum("hc,d->hdc", taps, hidden)
            slope = torch.full_like(b_in, SLOPE).masked_fill_(b_in > 0, 1.0)  # LeakyReLU's derivative at b_in
            grad_b_in += torch.einsum("hdc,hc->d", w_out[:, :, 0, :], taps) * slope
        grad_w_in = grad_weight_in[:, :-1].reshape(hidden_channels, rows, width, channels).permute(0, 3, 1, 2)
        grads: list[torch.Tensor | None] = [None] * len(ctx.shapes)
        if grad_z is not None:
            offset = 0
            for index, shape in enumerate(ctx.shapes):
                if ctx.needs_input_grad[index + 7]:
                    part = grad_z[:, offset : offset + shape[-3]]
                    grads[index] = part.sum(0) if len(shape) == 3 else part.contiguous()
                offset += shape[-3]
        return (None, None, None, grad_w_in.contiguous(), grad_b_in, grad_w_out, grad.sum((0, 2, 3)), *grads)


def _im2col(parts, keep, batch: int, block: Block, kernel: tuple[int, int], channels: int) -> torch.Tensor:
    """[B, taps·C_in + 1, R·W]: the block's z (rows start..stop−1, keys < width) at each tap, zero past the
    map's edges (and past `width`, where z is zero), and a row of ones (Conv_in's bias)."""
    rows, width = kernel
    length, keys = block.stop - block.start, block.width
    taps = _taps(rows, width, length, keys)
    centre = len(taps) - 1 - width // 2  # the tap (kq − 1, kk//2) reads its own place
    cols = parts[0].new_empty((batch, len(taps) * channels + 1, length, keys))
    cols[:, -1].fill_(1.0)
    z = cols[:, centre * channels : (centre + 1) * channels]
    region = (slice(block.start, block.stop), slice(0, keys))
    offset = 0
    for part in parts:  # tril(concat(parts)) into the centre tap's rows
        target = z[:, offset : offset + part.shape[-3]]
        source = part[(..., *region)].expand_as(target)
        if keep is None:
            target.copy_(source)
        else:
            torch.mul(source, keep[region], out=target)
        offset += part.shape[-3]
    for index, (to, source) in enumerate(taps):
        if index != centre:
            target = cols[:, index * channels : (index + 1) * channels]
            target[(..., *to)] = z[(..., *source)]
            _zero_border(target, to)
    return cols.view(batch, cols.shape[1], length * keys)


def _sum_taps(spread: torch.Tensor, out: torch.Tensor, block: Block, kernel: tuple[int, int], heads: int,
              b_out: torch.Tensor) -> None:
    """out[..., :exact] = b_out + Σ_taps Y[tap] shifted back; `out` is the block's rows [B, H, R, keys]."""
    rows, width = kernel
    length, keys = block.stop - block.start, block.width
    taps = _taps(rows, width, length, keys)
    centre = len(taps) - 1 - width // 2
    spread = spread.view(spread.shape[0], len(taps), heads, length, keys)
    if block.exact == keys:
        target = out[..., :keys]
        torch.add(spread[:, centre], b_out[:, None, None], out=target)
        for index, (to, source) in enumerate(taps):
            if index != centre:
                target[(..., *to)] += spread[(..., index, slice(None), *source)]
        return
    # Exact keys only: a tap's shifted read stays inside `width` for keys below `exact` (= width − kk//2).
    target = out[..., : block.exact]
    torch.add(spread[:, centre, ..., : block.exact], b_out[:, None, None], out=target)
    for index, (to, source) in enumerate(taps):
        if index != centre:
            offset = source[1].start - to[1].start
            keys_to = slice(max(0, -offset), block.exact)
            keys_from = slice(keys_to.start + offset, block.exact + offset)
            target[..., to[0], keys_to] += spread[:, index, :, source[0], keys_from]


def _spread_grad(grad: torch.Tensor, block: Block, kernel: tuple[int, int], heads: int) -> torch.Tensor:
    """[B, taps·H, R·W]: the gradient of Y, the block's output gradient (its exact keys) read at each tap."""
    rows, width = kernel
    length, keys = block.stop - block.start, block.width
    if block.exact < keys:  # the keys past `exact` are not the convolutions' output: no gradient through them
        exact = grad.new_zeros((*grad.shape[:2], length, keys))
        exact[..., : block.exact] = grad[..., : block.exact]
        grad = exact
    elif keys < grad.shape[-1]:
        grad = grad[..., :keys]
    taps = _taps(rows, width, length, keys)
    spread = grad.new_empty((grad.shape[0], len(taps), heads, length, keys))
    for index, (to, source) in enumerate(taps):
        target = spread[:, index]
        target[(..., *source)] = grad[(..., *to)]
        _zero_border(target, source)
    return spread.view(grad.shape[0], len(taps) * heads, length * keys)


def _col2im(grad_cols: torch.Tensor, grad_z: torch.Tensor, block: Block, kernel: tuple[int, int],
            channels: int) -> None:
    """grad_z (the block's rows and keys) = the gradient of each tap of cols, shifted back to its place, summed."""
    rows, width = kernel
    length, keys = block.stop - block.start, block.width
    taps = _taps(rows, width, length, keys)
    centre = len(taps) - 1 - width // 2
    grad_cols = grad_cols.view(grad_cols.shape[0], len(taps), channels, length, keys)
    grad_z.copy_(grad_cols[:, centre])
    for index, (to, source) in enumerate(taps):
        if index != centre:
            grad_z[(..., *source)] += grad_cols[(slice(None), index, ..., *to)]

"""Triton kernels of the fused DAPE attention path; the design and its reasons are in `__init__.py`.

Layout inside a program. A tile is M query rows x NZ key columns, all heads together. Per-head tensors of the
attention part are `[HP, M, NZ]` (heads padded to HP); the processor works on points-major maps `[P, X]`
(P = M·NZ points, row-major: point p is row p // NZ, column p % NZ; X channels), so that its channel
contractions are matrix products `[P, C] @ [C, D]`. A shift along the key axis is a gather along the
points (`_shift`): exact inside a row of the tile, garbage where it crosses a row edge, which is why a
tile's results are trusted only on its interior columns (see `__init__.py`, "overlapping tiles").

Constexpr names: HP heads padded, DH head dim padded, DP processor channels padded, KW kernel width,
W = KW // 2, M rows, NZ columns, P = M·NZ, NW = the skew width of the bias-gradient reduction.
Z_MODE (the processor's input z): 0 = [S, B] (concat forms), 1 = S + B (add_residual), 2 = B (bias_only),
3 = S (no bias). RES_B: the logits add B. TRIL: z is zeroed right of the diagonal. CAUSAL: causal mask
and causal distance (i − j clamped at 0) for the bias table; otherwise |i − j| and no mask.
"""

from __future__ import annotations

import triton
import triton.language as tl


# ---------------------------------------------------------------- small helpers
@triton.jit
def _shift(x, s: tl.constexpr, P: tl.constexpr, X: tl.constexpr):
    """y[p] = x[p + s] along the points of a [P, X] map (a shift of s along the key axis)."""
    if s != 0:
        index = tl.minimum(tl.maximum(tl.arange(0, P) + s, 0), P - 1)
        x = tl.gather(x, tl.broadcast_to(index[:, None], (P, X)), 0)
    return x


@triton.jit
def _load_rows(ptr, base, s_h, s_t, s_d, row0, T, H, DHR, HP: tl.constexpr, M: tl.constexpr, DH: tl.constexpr):
    """[HP, M, DH]: rows row0.. of one batch element of a [B, H, T, d] tensor, zero outside."""
    h = tl.arange(0, HP)[:, None, None]
    r = row0 + tl.arange(0, M)[None, :, None]
    e = tl.arange(0, DH)[None, None, :]
    mask = (h < H) & (r >= 0) & (r < T) & (e < DHR)
    return tl.load(ptr + base + h * s_h + r * s_t + e * s_d, mask=mask, other=0.0)


@triton.jit
def _load_cols(ptr, base, s_h, s_t, s_d, col0, T, H, DHR, HP: tl.constexpr, DH: tl.constexpr, NZ: tl.constexpr):
    """[HP, DH, NZ]: rows col0.. of a [B, H, T, d] tensor as columns (keys transposed), zero outside."""
    h = tl.arange(0, HP)[:, None, None]
    e = tl.arange(0, DH)[None, :, None]
    j = col0 + tl.arange(0, NZ)[None, None, :]
    mask = (h < H) & (j >= 0) & (j < T) & (e < DHR)
    return tl.load(ptr + base + h * s_h + j * s_t + e * s_d, mask=mask, other=0.0)


@triton.jit
def _row_values(ptr, base, row0, T, H, HP: tl.constexpr, M: tl.constexpr):
    """[HP, M] of a [B, H, T] per-row tensor (log-sum-exp, delta), zero outside."""
    h = tl.arange(0, HP)[:, None]
    r = row0 + tl.arange(0, M)[None, :]
    return tl.load(ptr + base + h * T + r, mask=(h < H) & (r < T), other=0.0)


@triton.jit
def _bias_points(table, row0, col0, T, H, CAUSAL: tl.constexpr, HP: tl.constexpr, NZ: tl.constexpr,
                 P: tl.constexpr):
    """B as a [P, HP] map, read from the Toeplitz table [H, T] (B depends on the distance only)."""
    p = tl.arange(0, P)
    i = row0 + p // NZ
    j = col0 + p % NZ
    if CAUSAL:
        distance = tl.maximum(i - j, 0)
    else:
        distance = tl.abs(i - j)
    distance = tl.minimum(distance, T - 1)
    h = tl.arange(0, HP)[None, :]
    mask = ((j >= 0) & (j < T))[:, None] & (h < H)
    return tl.load(table + h * T + distance[:, None], mask=mask, other=0.0)


# ---------------------------------------------------------------- the processor, forward
@triton.jit
def _processor(q3, k_ptr, k_base, s_kh, s_kt, s_kd, table, w_in_s, w_in_b, b_in, w_out, b_out,
               row0, col0, T, H, DHR, scale,
               HP: tl.constexpr, DH: tl.constexpr, DP: tl.constexpr, KW: tl.constexpr, W: tl.constexpr,
               M: tl.constexpr, NZ: tl.constexpr, P: tl.constexpr, Z_MODE: tl.constexpr, RES_B: tl.constexpr,
               HAS_BIAS: tl.constexpr, TRIL: tl.constexpr, CAUSAL: tl.constexpr, DOT: tl.constexpr,
               ACC: tl.constexpr, PREC: tl.constexpr):
    """z (its S part and its B part), the first convolution's output after LeakyReLU `g` (whose sign is the
    pre-activation's, all the backward needs of it) and the logits of one tile, as [P, X] maps. Valid
    columns: z everywhere, g in [W, NZ − W), the logits in [2W, NZ − 2W)."""
    k3 = _load_cols(k_ptr, k_base, s_kh, s_kt, s_kd, col0, T, H, DHR, HP, DH, NZ)
    scores3 = tl.dot(q3.to(DOT), k3.to(DOT), out_dtype=ACC, input_precision=PREC) * scale  # [HP, M, NZ]
    scores = tl.reshape(tl.permute(scores3, (1, 2, 0)), (P, HP))
    p = tl.arange(0, P)
    i = row0 + p // NZ
    j = col0 + p % NZ
    inside = ((j >= 0) & (j < T))[:, None]  # the convolutions zero-pad past both ends of the key axis
    keep = inside
    if TRIL:
        keep = keep & (j <= i)[:, None]
    if HAS_BIAS:
        bias = _bias_points(table, row0, col0, T, H, CAUSAL, HP, NZ, P).to(ACC)
    else:
        bias = tl.zeros((P, HP), ACC)
    if Z_MODE == 1:
        z_s = tl.where(keep, scores + bias, 0.0)
    else:
        z_s = tl.where(keep, scores, 0.0)
    z_b = tl.where(keep, bias, 0.0)
    in_taps = tl.arange(0, HP)[:, None] * DP + tl.arange(0, DP)[None, :]  # [HP, DP] of a [k, HP, DP] weight
    out_taps = tl.arange(0, DP)[:, None] * HP + tl.arange(0, HP)[None, :]  # [DP, HP] of a [k, DP, HP] weight
    # hidden(p) = b_in + Σ_t z(p + t − W)·w_t: the product's input is shifted, in the products' dtype (exact: a
    # shift moves values), which moves a quarter of the bytes of its output in float32 (bfloat16, HP < DP).
    hidden = tl.zeros((P, DP), ACC) + tl.load(b_in + tl.arange(0, DP))[None, :].to(ACC)
    z_s_dot = z_s.to(DOT)
    z_b_dot = z_b.to(DOT)
    for t in tl.static_range(KW):
        if Z_MODE != 2:
            hidden = tl.dot(_shift(z_s_dot, t - W, P, HP), tl.load(w_in_s + t * HP * DP + in_taps).to(DOT), hidden,
                            input_precision=PREC)
        if Z_MODE == 0 or Z_MODE == 2:
            hidden = tl.dot(_shift(z_b_dot, t - W, P, HP), tl.load(w_in_b + t * HP * DP + in_taps).to(DOT), hidden,
                            input_precision=PREC)
    g = tl.where(inside, tl.where(hidden > 0, hidden, 0.01 * hidden), 0.0)  # g has hidden's sign
    f = tl.zeros((P, HP), ACC) + tl.load(b_out + tl.arange(0, HP))[None, :].to(ACC)
    for u in tl.static_range(KW):
        y = tl.dot(g.to(DOT), tl.load(w_out + u * DP * HP + out_taps).to(DOT), out_dtype=ACC,
                   input_precision=PREC)
        if u != W:
            y = _shift(y, u - W, P, HP)
        f += y
    logits = scores + f
    if RES_B:
        logits += bias
    return z_s, z_b, g, logits


# ---------------------------------------------------------------- forward: online softmax over key tiles
@triton.jit
def dape_forward_kernel(q, k, v, table, w_in_s, w_in_b, b_in, w_out, b_out, out, lse,
                        s_qb, s_qh, s_qt, s_qd, s_kb, s_kh, s_kt, s_kd, s_vb, s_vh, s_vt, s_vd,
                        s_ob, s_oh, s_ot, s_od, T, H, DHR, scale,
                        HP: tl.constexpr, DH: tl.constexpr, DP: tl.constexpr, KW: tl.constexpr, W: tl.constexpr,
                        M: tl.constexpr, NZ: tl.constexpr, P: tl.constexpr, OWN: tl.constexpr, Z_MODE: tl.constexpr,
                        RES_B: tl.constexpr, HAS_BIAS: tl.constexpr, TRIL: tl.constexpr, CAUSAL: tl.constexpr,
                        DOT: tl.constexpr, ACC: tl.constexpr, PREC: tl.constexpr):
    """One program: M query rows of one sequence, all heads. A key tile owns OWN = NZ − 4W columns and
    computes 2W more on each side (the two convolutions' halo); tiles right of the rows' diagonal are
    skipped. Writes the output and each row's log-sum-exp (for the backward)."""
    row0 = tl.program_id(0) * M
    batch = tl.program_id(1).to(tl.int64)
    q3 = _load_rows(q, batch * s_qb, s_qh, s_qt, s_qd, row0, T, H, DHR, HP, M, DH)
    row_max = tl.full((HP, M), float("-inf"), ACC)
    row_sum = tl.zeros((HP, M), ACC)
    acc = tl.zeros((HP, M, DH), ACC)
    rows = row0 + tl.arange(0, M)[None, :, None]
    stop = T
    if CAUSAL:
        stop = tl.minimum(T, row0 + M)
    for start in range(0, stop, OWN):
        col0 = start - 2 * W
        _, _, _, logits = _processor(
            q3, k, batch * s_kb, s_kh, s_kt, s_kd, table, w_in_s, w_in_b, b_in, w_out, b_out, row0, col0, T, H,
            DHR, scale, HP, DH, DP, KW, W, M, NZ, P, Z_MODE, RES_B, HAS_BIAS, TRIL, CAUSAL, DOT, ACC, PREC)
        cols = col0 + tl.arange(0, NZ)[None, None, :]
        owned = (cols >= start) & (cols < start + OWN) & (cols < T)
        if CAUSAL:
            owned = owned & (cols <= rows)
        logits3 = tl.where(owned, tl.permute(tl.reshape(logits, (M, NZ, HP)), (2, 0, 1)), float("-inf"))
        new_max = tl.maximum(row_max, tl.max(logits3, 2))
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)  # a row with nothing unmasked yet
        weights = tl.exp(logits3 - shift[:, :, None])
        rescale = tl.exp(row_max - shift)
        row_sum = row_sum * rescale + tl.sum(weights, 2)
        v3 = _load_rows(v, batch * s_vb, s_vh, s_vt, s_vd, col0, T, H, DHR, HP, NZ, DH)
        acc = tl.dot(weights.to(DOT), v3.to(DOT), acc * rescale[:, :, None], input_precision=PREC)
        row_max = new_max
    row_sum = tl.where(row_sum == 0.0, 1.0, row_sum)
    h = tl.arange(0, HP)[:, None, None]
    e = tl.arange(0, DH)[None, None, :]
    tl.store(out + batch * s_ob + h * s_oh + rows * s_ot + e * s_od,
             (acc / row_sum[:, :, None]).to(out.dtype.element_ty), mask=(h < H) & (rows < T) & (e < DHR))
    h2 = tl.arange(0, HP)[:, None]
    r2 = row0 + tl.arange(0, M)[None, :]
    tl.store(lse + batch * H * T + h2 * T + r2, row_max + tl.log(row_sum), mask=(h2 < H) & (r2 < T))


# ---------------------------------------------------------------- backward: the chain, tile by tile
@triton.jit
def _second_conv_backward(g, d_logits, d_logits_owned, inside, w_out, slot_w, slot_b,
                          DP: tl.constexpr, HP: tl.constexpr, KW: tl.constexpr, W: tl.constexpr, P: tl.constexpr,
                          DOT: tl.constexpr, ACC: tl.constexpr, PREC: tl.constexpr):
    """From the logits' gradient (exact in [2W, NZ − 2W)) to the gradient at the first convolution's
    pre-activation (exact in [3W, NZ − 3W)); adds the second convolution's weight and bias gradients of the
    owned points into this program's slots."""
    tl.atomic_add(slot_b + tl.arange(0, HP), tl.sum(d_logits_owned, 0))
    taps = tl.arange(0, DP)[:, None] * HP + tl.arange(0, HP)[None, :]  # [DP, HP] of a [k, DP, HP] weight
    taps_t = tl.arange(0, DP)[None, :] * HP + tl.arange(0, HP)[:, None]  # its transpose [HP, DP]
    d_hidden = tl.zeros((P, DP), ACC)
    for u in tl.static_range(KW):
        g_u = g  # f(p) reads g(p + u − W): g's gradient at p reads the logits' gradient at p − (u − W)
        d_u = d_logits
        if u != W:
            g_u = _shift(g, u - W, P, DP)
            d_u = _shift(d_logits, W - u, P, HP)
        tl.atomic_add(slot_w + u * DP * HP + taps,
                      tl.dot(tl.trans(g_u).to(DOT), d_logits_owned.to(DOT), out_dtype=ACC, input_precision=PREC))
        d_hidden = tl.dot(d_u.to(DOT), tl.load(w_out + u * DP * HP + taps_t).to(DOT), d_hidden, input_precision=PREC)
    return tl.where(inside, tl.where(g > 0, d_hidden, 0.01 * d_hidden), 0.0)  # LeakyReLU', from g's sign


@triton.jit
def _first_conv_backward(z_s, z_b, d_pre, d_pre_owned, w_in_s, w_in_b, slot_s, slot_b, slot_bias,
                         DP: tl.constexpr, HP: tl.constexpr, KW: tl.constexpr, W: tl.constexpr, P: tl.constexpr,
                         Z_MODE: tl.constexpr, DOT: tl.constexpr, ACC: tl.constexpr, PREC: tl.constexpr):
    """From the pre-activation gradient (exact in [3W, NZ − 3W)) to z's gradient, S part and B part (exact
    on owned columns, before the tril); adds the first convolution's weight and bias gradients of the owned
    points into this program's slots."""
    tl.atomic_add(slot_bias + tl.arange(0, DP), tl.sum(d_pre_owned, 0))
    taps = tl.arange(0, HP)[:, None] * DP + tl.arange(0, DP)[None, :]  # [HP, DP] of a [k, HP, DP] weight
    taps_t = tl.arange(0, HP)[None, :] * DP + tl.arange(0, DP)[:, None]  # its transpose [DP, HP]
    d_z_s = tl.zeros((P, HP), ACC)
    d_z_b = tl.zeros((P, HP), ACC)
    for t in tl.static_range(KW):
        d_t = d_pre
        z_s_t = z_s
        z_b_t = z_b
        if t != W:
            d_t = _shift(d_pre, W - t, P, DP)
        d_t = d_t.to(DOT)
        if Z_MODE != 2:
            if t != W:
                z_s_t = _shift(z_s, t - W, P, HP)
            tl.atomic_add(slot_s + t * HP * DP + taps,
                          tl.dot(tl.trans(z_s_t).to(DOT), d_pre_owned.to(DOT), out_dtype=ACC, input_precision=PREC))
            d_z_s = tl.dot(d_t, tl.load(w_in_s + t * HP * DP + taps_t).to(DOT), d_z_s, input_precision=PREC)
        if Z_MODE == 0 or Z_MODE == 2:
            if t != W:
                z_b_t = _shift(z_b, t - W, P, HP)
            tl.atomic_add(slot_b + t * HP * DP + taps,
                          tl.dot(tl.trans(z_b_t).to(DOT), d_pre_owned.to(DOT), out_dtype=ACC, input_precision=PREC))
            d_z_b = tl.dot(d_t, tl.load(w_in_b + t * HP * DP + taps_t).to(DOT), d_z_b, input_precision=PREC)
    return d_z_s, d_z_b


@triton.jit
def _bias_gradient(d_table, d_bias, row0, col0, T, H, CAUSAL: tl.constexpr, HP: tl.constexpr, M: tl.constexpr,
                   NZ: tl.constexpr, NW: tl.constexpr):
    """Add a tile's [HP, M, NZ] bias gradient into the table's gradient: sums along its diagonals (one distance
    each), found by skewing the tile so that each diagonal becomes a column (NW >= M + NZ − 1 of them)."""
    r = tl.arange(0, M)[None, :, None]
    diagonal = tl.arange(0, NW)[None, None, :]
    col = r + NZ - 1 - diagonal  # the column of row r on that diagonal
    index = tl.broadcast_to(tl.minimum(tl.maximum(col, 0), NZ - 1), (HP, M, NW))
    skewed = tl.where((col >= 0) & (col < NZ), tl.gather(d_bias, index, 2), 0.0)
    sums = tl.sum(skewed, 1)  # [HP, NW]
    d = tl.arange(0, NW)
    distance = row0 - col0 - (NZ - 1) + d  # i − j on each diagonal
    if CAUSAL:
        distance = tl.maximum(distance, 0)
    else:
        distance = tl.abs(distance)
    h = tl.arange(0, HP)[:, None]
    mask = (h < H) & (d < M + NZ - 1)[None, :] & (distance < T)[None, :]
    tl.atomic_add(d_table + h * T + tl.minimum(distance, T - 1)[None, :], sums, mask=mask)


@triton.jit
def dape_backward_kernel(q, k, v, d_out, lse, delta, table, w_in_s, w_in_b, b_in, w_out, b_out,
                         d_scores, weights_out, d_table, d_w_in_s, d_w_in_b, d_b_in, d_w_out, d_b_out,
                         s_qb, s_qh, s_qt, s_qd, s_kb, s_kh, s_kt, s_kd, s_vb, s_vh, s_vt, s_vd,
                         s_gb, s_gh, s_gt, s_gd, T, H, DHR, scale, chunk0, chunk_rows, chunk_keys,
                         HP: tl.constexpr, DH: tl.constexpr, DP: tl.constexpr, KW: tl.constexpr, W: tl.constexpr,
                         M: tl.constexpr, NZ: tl.constexpr, P: tl.constexpr, OWN: tl.constexpr, NW: tl.constexpr,
                         Z_MODE: tl.constexpr, RES_B: tl.constexpr, HAS_BIAS: tl.constexpr, TRIL: tl.constexpr,
                         CAUSAL: tl.constexpr, DOT: tl.constexpr, ACC: tl.constexpr, PREC: tl.constexpr):
    """One program: M query rows of a chunk of rows, all heads, every key tile with a non-zero gradient.
    Recomputes each tile's forward (the softmax from the saved log-sum-exp), runs the chain backward, and
    writes dS (the scores' gradient) and the softmax weights of its owned columns into [B, H, chunk_rows,
    chunk_keys] maps, from which the host gets dq, dk, dv by matrix products. A tile owns OWN = NZ − 8W
    columns: dS reads the pre-activation gradient W away, which reads the logits' gradient W further, whose
    logits read z 2W further."""
    program = tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)
    row0 = chunk0 + tl.program_id(0) * M
    batch = tl.program_id(1).to(tl.int64)
    q3 = _load_rows(q, batch * s_qb, s_qh, s_qt, s_qd, row0, T, H, DHR, HP, M, DH)
    do3 = _load_rows(d_out, batch * s_gb, s_gh, s_gt, s_gd, row0, T, H, DHR, HP, M, DH).to(DOT)
    row_lse = _row_values(lse, batch * H * T, row0, T, H, HP, M)
    row_delta = _row_values(delta, batch * H * T, row0, T, H, HP, M)
    rows3 = row0 + tl.arange(0, M)[None, :, None]
    h3 = tl.arange(0, HP)[:, None, None]
    c3 = tl.arange(0, NZ)[None, None, :]
    p = tl.arange(0, P)
    i = row0 + p // NZ
    # The last column with a non-zero gradient: the hidden map's reaches W right of the last row's diagonal
    # (b_in makes it non-zero there), and without the tril dS's reaches 2W.
    stop = T
    if CAUSAL:
        if TRIL:
            stop = tl.minimum(T, row0 + M + W)
        else:
            stop = tl.minimum(T, row0 + M + 2 * W)
    for start in range(0, stop, OWN):
        col0 = start - 4 * W
        z_s, z_b, g, logits = _processor(
            q3, k, batch * s_kb, s_kh, s_kt, s_kd, table, w_in_s, w_in_b, b_in, w_out, b_out, row0, col0, T, H,
            DHR, scale, HP, DH, DP, KW, W, M, NZ, P, Z_MODE, RES_B, HAS_BIAS, TRIL, CAUSAL, DOT, ACC, PREC)
        cols3 = col0 + c3
        valid = (c3 >= 2 * W) & (c3 < NZ - 2 * W) & (cols3 >= 0) & (cols3 < T) & (rows3 < T)
        if CAUSAL:
            valid = valid & (cols3 <= rows3)
        logits3 = tl.permute(tl.reshape(logits, (M, NZ, HP)), (2, 0, 1))
        weights = tl.where(valid, tl.exp(logits3 - row_lse[:, :, None]), 0.0)
        v3 = _load_cols(v, batch * s_vb, s_vh, s_vt, s_vd, col0, T, H, DHR, HP, DH, NZ)
        d_weights = tl.dot(do3, v3.to(DOT), out_dtype=ACC, input_precision=PREC)
        d_logits3 = weights * (d_weights - row_delta[:, :, None])  # exact in [2W, NZ − 2W)
        d_logits = tl.reshape(tl.permute(d_logits3, (1, 2, 0)), (P, HP))
        j = col0 + p % NZ
        inside = ((j >= 0) & (j < T))[:, None]
        owned = ((p % NZ >= 4 * W) & (p % NZ < 4 * W + OWN) & (j < T) & (i < T))[:, None]
        d_logits_owned = tl.where(owned, d_logits, 0.0)
        d_pre = _second_conv_backward(g, d_logits, d_logits_owned, inside, w_out,
                                      d_w_out + program * KW * DP * HP, d_b_out + program * HP,
                                      DP, HP, KW, W, P, DOT, ACC, PREC)
        d_z_s, d_z_b = _first_conv_backward(z_s, z_b, d_pre, tl.where(owned, d_pre, 0.0), w_in_s, w_in_b,
                                            d_w_in_s + program * KW * HP * DP, d_w_in_b + program * KW * HP * DP,
                                            d_b_in + program * DP, DP, HP, KW, W, P, Z_MODE, DOT, ACC, PREC)
        keep = inside & owned
        if TRIL:
            keep = keep & (j <= i)[:, None]
        d_s = d_logits_owned  # every form adds S to the logits
        if Z_MODE != 2:
            d_s += tl.where(keep, d_z_s, 0.0)
        rows_in_chunk = rows3 - chunk0
        store = (h3 < H) & (c3 >= 4 * W) & (c3 < 4 * W + OWN) & (cols3 < chunk_keys) & (rows3 < T) \
            & (rows_in_chunk < chunk_rows)
        offsets = ((batch * H + h3) * chunk_rows + rows_in_chunk) * chunk_keys + cols3
        tl.store(d_scores + offsets, tl.permute(tl.reshape(d_s, (M, NZ, HP)), (2, 0, 1)).to(d_scores.dtype.element_ty),
                 mask=store)
        tl.store(weights_out + offsets, weights.to(weights_out.dtype.element_ty), mask=store)
        if HAS_BIAS:
            if Z_MODE == 1:
                d_b = tl.where(keep, d_z_s, 0.0)
            else:
                d_b = tl.where(keep, d_z_b, 0.0)
            if RES_B:
                d_b += d_logits_owned
            _bias_gradient(d_table, tl.permute(tl.reshape(d_b, (M, NZ, HP)), (2, 0, 1)), row0, col0, T, H, CAUSAL,
                           HP, M, NZ, NW)

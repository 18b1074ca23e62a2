"""Learned position patterns (the papers' figures): per layer and head, the processed attention logits
A = f(S, B) of every query against every key of one window (`attention_maps`, `save_attention_maps`: the query ×
key maps DAPE and DAPE V2 draw), and, for one query row, the bias B and the logits over all keys
(`attention_rows`, `save_heat_maps`).

The model is run once with forward pre-hooks that capture each attention module's input; the maps are then
recomputed from the module's public pieces (`qkv`, `pos.rotate`, `pos.bias`, `processor`), so that they are
the direct path's whatever path the forward took (blocks at long lengths). A 1×k kernel mixes keys within one
row only, so one query row is exact and cheap even at the longest length; a taller kernel gets the few earlier
rows it reads (`processor.row_halo`). The window is the caller's (`visualise_window`: the first L tokens of the
held-out stream, the same for every trial of a study).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from ..attention import CausalSelfAttention

MAP_PIXELS = 256  # a drawn and stored map is pooled to at most this many queries and keys (mean of each block)


def visualise_window(held_out: list[np.ndarray], length: int) -> torch.Tensor:
    """The window the maps are drawn on: the first `length` tokens of the held-out stream (its documents or
    regions in order, joined), as [1, length]. The same for every trial of a study and independent of how
    the evaluation picks its windows; an error naming the lengths where the stream is shorter."""
    joined = np.concatenate([np.asarray(part) for part in held_out]) if held_out else np.zeros(0, dtype=np.int64)
    if len(joined) < length:
        raise ValueError(f"the held-out text has {len(joined)} tokens, fewer than the {length} of the window to "
                         "visualise: visualise a shorter evaluation length or use more data")
    return torch.as_tensor(joined[:length].astype(np.int64))[None]


def _layer_inputs(model: torch.nn.Module,
                  tokens: torch.Tensor) -> list[tuple[CausalSelfAttention, torch.Tensor, torch.Tensor]]:
    """Each attention layer of the model with the input x [1, L, C] and the positions [L] it was called with
    on `tokens`."""
    model.eval()
    modules = _attention_modules(model)
    captured: dict[int, tuple] = {}
    hooks = [m.register_forward_pre_hook(lambda module, args, i=i: captured.__setitem__(i, args))
             for i, m in enumerate(modules)]
    try:
        model(tokens)
    finally:
        for hook in hooks:
            hook.remove()
    layers = []
    for i, attn in enumerate(modules):
        x, *positions = captured[i]  # a model called without positions: 0..L-1
        layers.append((attn, x, positions[0] if positions else torch.arange(x.shape[1], device=x.device)))
    return layers


def _pooled(values: np.ndarray, pixels: int = MAP_PIXELS) -> np.ndarray:
    """[H, L, L] -> [H, n, n] with n <= pixels: the mean of each block of the finite values (a block wholly
    above the diagonal stays NaN)."""
    heads, length, _ = values.shape
    factor = math.ceil(length / pixels)
    if factor == 1:
        return values
    n = math.ceil(length / factor)
    padded = np.full((heads, n * factor, n * factor), np.nan, dtype=np.float32)
    padded[:, :length, :length] = values
    blocks = padded.reshape(heads, n, factor, n, factor)
    finite = np.isfinite(blocks)
    counts = finite.sum(axis=(2, 4))
    sums = np.where(finite, blocks, 0.0).sum(axis=(2, 4))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan).astype(np.float32)


@torch.no_grad()
def attention_maps(model: torch.nn.Module, tokens: torch.Tensor, pixels: int = MAP_PIXELS) -> list[np.ndarray]:
    """For `tokens` [1, L]: per layer, the processed logits A of every query against every key, [H, n, n]
    (keys after their query: NaN), pooled to n <= `pixels` (block means) so that a long window stays small."""
    maps = []
    for attn, x, positions in _layer_inputs(model, tokens):
        length = x.shape[1]
        q, k, _ = attn.qkv(x).view(x.shape[0], length, 3, attn.n_head, attn.head_dim).permute(2, 0, 3, 1, 4)
        q, k = attn.pos.rotate(q, k, positions, positions)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(attn.head_dim)  # [1, H, L, L]
        bias = attn.pos.bias(positions, positions)  # [H, L, L] or None
        if attn.processor is not None:
            logits = attn.processor(scores, bias, positions, positions)
        else:
            logits = scores if bias is None else scores + bias
        future = positions[None, :] > positions[:, None]
        logits = logits[0].float().masked_fill(future, float("nan"))
        maps.append(_pooled(logits.cpu().numpy(), pixels))
    return maps


def save_attention_maps(maps: list[np.ndarray], directory: str | Path, title: str, length: int) -> list[Path]:
    """One PNG per layer (a panel per head: query × key, the query's row top-down, one colour scale per layer)
    and one .npz with every (pooled) map. `length`: the window's tokens, for the axes. Drawn on matplotlib's
    Figure directly (no pyplot, no tight layout: a fixed layout costs no measuring pass)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for layer, values in enumerate(maps):
        heads = values.shape[0]
        finite = values[np.isfinite(values)]
        low, high = (np.percentile(finite, [2, 98]) if finite.size else (0.0, 1.0))
        figure = Figure(figsize=(0.6 + 2.3 * heads + 0.9, 3.4))
        axes = figure.subplots(1, heads, squeeze=False)[0]
        figure.subplots_adjust(left=0.6 / figure.get_figwidth(), right=1 - 0.9 / figure.get_figwidth(), bottom=0.17,
                               top=0.78, wspace=0.15)
        image = None
        for head, axis in enumerate(axes):
            image = axis.imshow(values[head], cmap="viridis", vmin=low, vmax=high, interpolation="nearest",
                                extent=(0, length, length, 0))
            axis.set_title(f"head {head}", fontsize=9)
            axis.set_xlabel("key position", fontsize=8)
            axis.tick_params(labelsize=7)
            if head:
                axis.set_yticklabels([])
            else:
                axis.set_ylabel("query position", fontsize=8)
        colour = figure.add_axes((1 - 0.75 / figure.get_figwidth(), 0.17, 0.12 / figure.get_figwidth(), 0.61))
        assert image is not None, "a layer's map has at least one head, so one image was drawn"
        figure.colorbar(image, cax=colour).ax.tick_params(labelsize=7)
        figure.suptitle(f"{title}\nlayer {layer}: processed attention logits A (query × key)", fontsize=9)
        path = directory / f"attention_layer{layer}.png"
        figure.savefig(path, dpi=100)
        paths.append(path)
    npz = directory / "attention_maps.npz"
    # numpy's stub: a **dict of arrays could fill the keyword `allow_pickle` (bool), which these names never do
    np.savez_compressed(npz, **{f"layer{layer}_logits": values for layer, values in enumerate(maps)})  # type: ignore[arg-type]
    return paths + [npz]


def _attention_modules(model: torch.nn.Module) -> list[CausalSelfAttention]:
    return [m for m in model.modules() if isinstance(m, CausalSelfAttention)]


@torch.no_grad()
def attention_rows(model: torch.nn.Module, tokens: torch.Tensor, query: int | None = None) -> list[dict]:
    """For `tokens` [1, L] and query position `query` (default: the last), one dict per layer with
    `bias` [H, L] (None for encodings without a bias) and `logits` [H, L] (keys after the query: NaN)."""
    rows = []
    for attn, x, positions in _layer_inputs(model, tokens):
        length = x.shape[1]
        row = length - 1 if query is None else query
        # A kernel taller than one row also reads earlier query rows (the processor's `row_halo`).
        halo = getattr(attn.processor, "row_halo", 0) if attn.processor is not None else 0
        first = max(0, row - halo)
        q, k, _ = attn.qkv(x).view(x.shape[0], length, 3, attn.n_head, attn.head_dim).permute(2, 0, 3, 1, 4)
        q, k = attn.pos.rotate(q, k, positions, positions)
        q_pos = positions[first : row + 1]
        scores = (q[:, :, first : row + 1] @ k.transpose(-2, -1)) / math.sqrt(attn.head_dim)  # [1, H, rows, L]
        bias = attn.pos.bias(q_pos, positions)  # [H, rows, L] or None
        if attn.processor is not None:
            logits = attn.processor(scores, bias, q_pos, positions)
        else:
            logits = scores if bias is None else scores + bias
        logits = logits[0, :, -1].float().masked_fill(positions[None, :] > q_pos[-1], float("nan"))
        rows.append({"bias": None if bias is None else bias[:, -1].float().cpu().numpy(),
                     "logits": logits.cpu().numpy(), "query": int(row)})
    return rows


def save_heat_maps(rows: list[dict], directory: str | Path, title: str = "") -> list[Path]:
    """One PNG per layer (bias and processed logits, heads × keys) and one .npz with every array."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    arrays = {}
    for layer, row in enumerate(rows):
        panels = [("bias B", row["bias"]), ("processed logits A", row["logits"])]
        panels = [(name, values) for name, values in panels if values is not None]
        figure, axes = plt.subplots(len(panels), 1, figsize=(10, 1.2 + 0.5 * len(row["logits"]) * len(panels)),
                                    squeeze=False)
        for axis, (name, values) in zip(axes[:, 0], panels):
            image = axis.imshow(values, aspect="auto", interpolation="nearest", cmap="viridis")
            axis.set_title(f"layer {layer}: {name}, query {row['query']}")
            axis.set_ylabel("head")
            axis.set_xlabel("key position")
            figure.colorbar(image, ax=axis)
        if title:
            figure.suptitle(title)
        figure.tight_layout()
        path = directory / f"attention_layer{layer}.png"
        figure.savefig(path, dpi=100)
        plt.close(figure)
        paths.append(path)
        arrays[f"layer{layer}_logits"] = row["logits"]
        if row["bias"] is not None:
            arrays[f"layer{layer}_bias"] = row["bias"]
    npz = directory / "attention_rows.npz"
    np.savez_compressed(npz, **arrays)
    return paths + [npz]

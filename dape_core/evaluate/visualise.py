"""Learned position patterns (the papers' figure): for one query row, per layer and head, the position bias
B and the processed logits A = f(S, B) over all keys, saved as heat maps and as arrays.

The model is run once with forward pre-hooks that capture each attention module's input; the row is then
recomputed from the module's public pieces (`qkv`, `pos.rotate`, `pos.bias`, `processor`). A 1×k kernel
mixes keys within one row only, so one query row is exact and cheap even at the longest length; a taller
kernel gets the few earlier rows it reads (`processor.row_halo`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import torch


def _attention_modules(model: torch.nn.Module) -> list[Any]:  # duck-typed: CausalSelfAttention's face
    return [m for m in model.modules() if hasattr(m, "qkv") and hasattr(m, "pos")]


@torch.no_grad()
def attention_rows(model: torch.nn.Module, tokens: torch.Tensor, query: int | None = None) -> list[dict]:
    """For `tokens` [1, L] and query position `query` (default: the last), one dict per layer with
    `bias` [H, L] (None for encodings without a bias) and `logits` [H, L] (keys after the query: NaN)."""
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
    rows = []
    for i, attn in enumerate(modules):
        x = captured[i][0]
        length = x.shape[1]
        positions = captured[i][1] if len(captured[i]) > 1 else torch.arange(length, device=x.device)
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

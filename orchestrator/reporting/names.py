"""Settings and their values in words, for axis labels, panel titles and legends ("kernel size", not
`model.kernel_size`; "DAPE V2", not `processor=dapev2`). A setting without a word of its own is named by its
last dotted part with spaces for underscores."""

from __future__ import annotations

from typing import Any

from dape_core.encodings import ENCODINGS

SETTINGS = {
    "lr": "learning rate", "d_dape": "DAPE width", "kernel_size": "kernel size", "pos_encoding": "position encoding",
    "processor": "score processor", "preset": "model size", "seq_len": "training length",
    "train_length": "training length", "batch_size": "batch size", "steps": "training steps", "leak": "leakage",
    "form": "DAPE form", "seed": "seed", "rope_random_max": "randomized RoPE's longest length",
    "fire_width": "FIRE width", "fire_l0": "FIRE L₀", "warmup_steps": "warm-up steps", "weight_decay": "weight decay",
    "grad_accum": "gradient accumulation", "attention_block_size": "attention block size",
}
VALUES = {
    "processor": {"none": "no processor", "dape": "DAPE", "dapev2": "DAPE V2"},
    "pos_encoding": {name: encoding.label for name, encoding in ENCODINGS.items()},  # dape_core/encodings.py
    "form": {"concat_residual": "concat + residual", "concat": "concat", "add_residual": "add + residual",
             "bias_only": "bias only"},
}


def setting(key: str) -> str:
    """`model.kernel_size` or `kernel_size` -> "kernel size"."""
    name = key.rsplit(".", 1)[-1]
    return SETTINGS.get(name, name.replace("_", " "))


def value(key: str, raw: Any) -> str:
    name = key.rsplit(".", 1)[-1]
    text = f"{raw:g}" if isinstance(raw, float) else str(raw)
    return VALUES.get(name, {}).get(text, text)


def assignment(key: str, raw: Any) -> str:
    """"kernel size 3", "learning rate 0.001"; a named value alone ("DAPE V2", "Kerple")."""
    name = key.rsplit(".", 1)[-1]
    if name in VALUES and str(raw) in VALUES[name]:
        return value(key, raw)
    return f"{setting(key)} {value(key, raw)}"


def point(text: str) -> str:
    """A grid point as the report's tables write it ("processor=dapev2, kernel_size=3", layout.point_text) in
    words ("DAPE V2, kernel size 3")."""
    if not text:
        return text
    parts = []
    for part in text.split(", "):
        key, sep, raw = part.partition("=")
        parts.append(assignment(key, raw) if sep else part)
    return ", ".join(parts)

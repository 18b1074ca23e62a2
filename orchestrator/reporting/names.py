"""Settings and their values in words, for axis labels, panel titles and legends ("kernel size", not
`model.kernel_size`; "DAPE V2", not `processor=dapev2`). A setting without a word of its own is named by its
last dotted part with spaces for underscores. The components' names and their settings' words are their
records' (dape_core/components.py), plugins' included once their study loaded them."""

from __future__ import annotations

from typing import Any, Literal

from dape_core import components

# The study's own settings; the components' settings have their words in their records.
SETTINGS = {
    "lr": "learning rate", "pos_encoding": "position encoding", "processor": "score processor", "preset": "model size",
    "seq_len": "training length", "train_length": "training length", "batch_size": "batch size",
    "steps": "training steps", "seed": "seed", "warmup_steps": "warm-up steps", "weight_decay": "weight decay",
    "grad_accum": "gradient accumulation",
}
# Settings whose values name components (the kinds `components.value_labels` knows).
NAMED: tuple[Literal["processor", "pos_encoding", "form"], ...] = ("processor", "pos_encoding", "form")


def values(name: str) -> dict[str, str]:
    """A setting's values in words: a component's name -> its label (the registry, at the time of asking)."""
    kind = next((kind for kind in NAMED if kind == name), None)
    return components.value_labels(kind) if kind is not None else {}


def setting(key: str) -> str:
    """`model.kernel_size` or `kernel_size` -> "kernel size"."""
    name = key.rsplit(".", 1)[-1]
    return SETTINGS.get(name) or components.setting_labels().get(name) or name.replace("_", " ")


def value(key: str, raw: Any) -> str:
    name = key.rsplit(".", 1)[-1]
    text = f"{raw:g}" if isinstance(raw, float) else str(raw)
    return values(name).get(text, text)


def assignment(key: str, raw: Any) -> str:
    """"kernel size 3", "learning rate 0.001"; a named value alone ("DAPE V2", "Kerple")."""
    name = key.rsplit(".", 1)[-1]
    if str(raw) in values(name):
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

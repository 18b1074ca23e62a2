"""The causality audit: a causal LM's output at position i may not depend on a later token. Every component
promises it (dape_core/components.py: encodings are causal, a processor may leak only with `model.leak`);
this checks the promise by perturbing the future, before a study's first trial launches (orchestrator's
study loading, for the components its plugins register; tests/test_components.py, for every built-in).

The check: a small model of the trial's components and settings (the same encoding, processor, form, kernel,
options and training length; 2 layers of width 32 over 2 heads, vocabulary 64), in evaluation mode on the
direct path, reads a random sequence of LENGTH tokens; then, for each probed position p, the same sequence
with the token at p changed. The logits at every position before p must not change. A component that leaks
is named with the first position whose output moved and the later position that moved it.
"""

from __future__ import annotations

from .config import ModelConfig

LENGTH = 24
PROBES = (LENGTH - 1, LENGTH // 2, 3)  # the positions whose token changes
TOLERANCE = 1e-5  # relative to the logits' scale: float32 noise is ~1e-7


def audited(model: ModelConfig) -> ModelConfig | None:
    """The small model the audit runs for `model`'s components, or None where no causality is promised: a
    bidirectional encoder (`causal: false`) or the leakage experiment (`leak: true`) read later tokens by design."""
    if not model.causal or model.leak:
        return None
    fields = {**model.to_dict(), "preset": "tiny", "n_layer": 2, "d_model": 32, "n_head": 2, "vocab_size": 64,
              "attention_block_size": None, "eval_block_size": None}
    return ModelConfig(**fields)


def future_leak(model: ModelConfig, seed: int = 0) -> str | None:
    """None when no output depends on a later token, else which position leaked (module docstring)."""
    import torch

    from .model import build_model

    small = audited(model)
    if small is None:
        return None
    torch.manual_seed(seed)
    built = build_model(small).eval()
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, small.vocab_size, (1, LENGTH), generator=generator)
    with torch.no_grad():
        reference = _logits(built, tokens)
        scale = reference.abs().max().item() or 1.0
        for probe in PROBES:
            changed = tokens.clone()
            changed[0, probe] = (changed[0, probe] + 1 + probe) % small.vocab_size
            moved = (_logits(built, changed)[:probe] - reference[:probe]).abs().amax(-1) > TOLERANCE * scale
            if moved.any():
                first = int(moved.nonzero()[0, 0])
                return (f"the output at position {first} changed when the token at position {probe} (a later one) "
                        f"changed: it reads the future")
    return None


def _logits(model, tokens):
    out = model(tokens)
    logits = out[0] if isinstance(out, tuple) else out
    return logits.reshape(tokens.shape[1], -1).float()

"""The component contract: what every position encoding, score processor and processor form promises, checked
on a small model of the study's components before a trial trains (docs/extending.md, "The contract").

The checks, each a `Refusal` naming the component, the check and the positions or numbers that failed:

- `leak`: `model.leak: true` only for a component that declares the `leak` setting (it reads it: DAPE's
  `tril`). On any other component the flag would switch the causality checks off for nothing.
- `causality`: no logit depends on a later token, with every parameter drawn at random (`SEEDS` draws from
  a normal distribution, so that a branch whose gate starts at zero is open), over the training path and the
  evaluation path, each direct and in blocks of rows (dape_core/attention.py): in training, the gradient of
  the logits up to a cut with respect to the embeddings after it must be zero; in evaluation (no gradients),
  the token at a probed position changes and no earlier logit may move. Skipped for a bidirectional model
  (`causal: false`) and for the leakage experiment (`leak: true` on a component that declares it).
- `block path`: the block paths (training's `attention_block_size`, evaluation's `eval_block_size`, and
  evaluation's last rows, `tail`) give the direct path's logits within `PATH_TOLERANCE`: a processor whose
  logits read more rows or keys than its `row_halo` / `key_halo` declare differs.
- `parameters`: the analytic count (the records' `Cost.parameters` and `Encoding.learned`, through
  `ModelConfig.num_parameters`) equals the built module's.
- `cost`: a processor's `Cost.macs` per score-map entry is within `COST_FACTOR` of the multiply-adds
  `torch.utils.flop_counter` counts in its forward (FLOPs = 2 x MACs). The counter sees matrix products and
  convolutions only: a processor of element-wise operations alone, where it counts nothing, is not compared.
- `determinism`: two models built with one seed give the same logits.
- `build`: the small model builds and runs at all (an exception is reported with its message).

The small model (`small_config`): the study's components and their settings, 1 layer of width 16 over 2 heads,
a vocabulary of 32, a sequence of `LENGTH` tokens, trained at `LENGTH // 2` (so YaRN-like encodings scale at
evaluation), blocks of `TRAIN_BLOCK_ROWS` rows in training and `EVAL_BLOCK_ROWS` in evaluation, on the CPU in
float32. It takes a fraction of a second per component (tests/benchmarks/bench_contract.py).

This module loads without torch (validating a study imports it for `leak_refusal`); the checks import it.
It knows nothing of the orchestrator: orchestrator/study/contract_checks.py runs it at `validate` and at
every command's loading of a study with plugins, and orchestrator/execution/plugins_on_workers.py on a Ray
worker before the first trial.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .config import MIN_BLOCK_ROWS, ModelConfig

if TYPE_CHECKING:
    import torch

LENGTH = 48  # tokens of the check's sequence
SEEDS = (0, 1, 2)  # random draws of every parameter
PROBES = (LENGTH - 1, LENGTH // 2 + 1, 3)  # evaluation: positions whose token changes
CUTS = (2, LENGTH // 4, LENGTH // 2 - 1, 3 * LENGTH // 4, LENGTH - 2)  # training: logits <= cut, embeddings after
TRAIN_BLOCK_ROWS = 10  # not a multiple of a kernel's rows, so block edges fall inside a kernel's reach
EVAL_BLOCK_ROWS = MIN_BLOCK_ROWS  # the fewest rows an evaluation block takes (attention.py block_rows)
TAIL = LENGTH // 3 - 3  # evaluation's last rows (CausalLM.forward(tail=)): starts inside a block
CAUSAL_TOLERANCE = 1e-5  # relative to the logits' (gradients') scale: float32 noise is ~1e-7
PATH_TOLERANCE = 1e-4  # block vs direct, relative to the logits' scale (a wrong halo moves them by ~1e-1)
COST_FACTOR = 2.0  # declared multiply-adds within [measured / 2, measured x 2]
SMALL = {"preset": "tiny", "n_layer": 1, "d_model": 16, "n_head": 2, "vocab_size": 32, "mlp_ratio": 2,
         "train_length": LENGTH // 2, "attention_block_size": None, "eval_block_size": None}
CHECKS = ("build", "leak", "causality", "block path", "parameters", "cost", "determinism")


@dataclass(frozen=True)
class Refusal:
    """One failed check: which component, which check (one of CHECKS), what failed (positions, numbers)."""

    component: str
    check: str
    detail: str

    def __str__(self) -> str:
        return f"{self.component} fails the {self.check} check: {self.detail}"


def describe(model: ModelConfig, part: str = "model") -> str:
    """The component(s) in words with their owner: `part` is "encoding", "processor" or "model" (both)."""
    encoding = f"encoding {model.pos_encoding!r} ({model.encoding.owner})"
    if not model.processor_facts.present:
        return encoding
    form = f", form {model.form_facts.name!r}" if model.form_facts.owner != "built-in" else ""
    processor = f"processor {model.processor!r} ({model.processor_facts.owner}{form})"
    return {"encoding": encoding, "processor": processor}.get(part, f"{processor} over {encoding}")


def key(model: ModelConfig) -> str:
    """What the contract sees of `model`: its components and the values of the settings they declare (two
    trials with one key are checked once)."""
    read = {name: getattr(model, name) if name in model.__dataclass_fields__ else model.options.get(name)
            for record in (model.encoding, model.processor_facts) for name in record.settings}
    return json.dumps([model.pos_encoding, model.processor, model.form_facts.name, model.leak, model.causal,
                       model.options, read], sort_keys=True, default=str)


def leak_refusal(model: ModelConfig) -> Refusal | None:
    """`model.leak: true` on components none of which declares the `leak` setting (no torch needed)."""
    if not model.leak or any("leak" in record.settings for record in (model.encoding, model.processor_facts)):
        return None
    return Refusal(describe(model), "leak", "model.leak is true, but no component in use declares the `leak` "
                   "setting (reads it): it would switch the causality checks off for a component that never leaks "
                   "by design. Drop model.leak, or declare Setting('leak', field=True) where the component reads it")


def small_config(model: ModelConfig) -> ModelConfig:
    """The contract's model: `model`'s components and settings at the size of SMALL (module docstring)."""
    fields = {**model.to_dict(), **SMALL}
    if fields.get("rope_random_max") is not None:
        fields["rope_random_max"] = max(fields["rope_random_max"], LENGTH)
    return ModelConfig(**fields)


def refusals(model: ModelConfig, seeds: tuple[int, ...] = SEEDS) -> list[Refusal]:
    """Every check of the contract on `model`'s components (module docstring); [] when all pass."""
    leak = leak_refusal(model)
    if leak is not None:
        return [leak]
    try:
        small = small_config(model)
    except ValueError as error:
        return [Refusal(describe(model), "build", f"no model of the contract's size builds ({SMALL}): {error}")]
    try:
        with _one_thread():
            return _checked(small, seeds)
    except Exception as error:  # noqa: BLE001 - the component's own code raised: reported, with its type
        return [Refusal(describe(small), "build", f"the small model raised {type(error).__name__}: {error}")]


@contextmanager
def _one_thread() -> Iterator[None]:
    """Torch on one thread while the checks run: the small model's maps are too small to share out, and on a
    loaded machine threads wait for each other (measured: 5x to 20x slower with 2 threads on 2 busy cores)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _checked(small: ModelConfig, seeds: tuple[int, ...]) -> list[Refusal]:
    found = [*_parameter_refusals(small), *_cost_refusals(small), *_determinism_refusals(small)]
    checks_causality = small.causal and not small.leak
    for seed in seeds:
        model = _random_model(small, seed)
        tokens = _tokens(small, seed)
        problems = _path_problems(model, tokens, checks_causality)
        by_check: dict[str, list[str]] = {}
        for check, detail in problems:
            by_check.setdefault(check, []).append(detail)
        for check, details in by_check.items():  # the first path's failure in full, the others' paths named
            others = [detail.split(":")[0] for detail in details[1:]]
            also = f"; also on: {', '.join(others)}" if others else ""
            found.append(Refusal(_blame(small, check, seeds), check, f"{details[0]} (parameter draw {seed}{also})"))
        if problems:
            break  # one draw's failures say it: the others would repeat them
    return found


def _blame(small: ModelConfig, check: str, seeds: tuple[int, ...]) -> str:
    """The component a causality or block-path failure belongs to: the encoding when it fails alone (without
    the processor), else the processor."""
    if not small.processor_facts.present:
        return describe(small, "encoding")
    alone = ModelConfig(**{**small.to_dict(), "processor": "none"})
    for seed in seeds:
        problems = _path_problems(_random_model(alone, seed), _tokens(alone, seed), small.causal and not small.leak)
        if any(found == check for found, _ in problems):
            return describe(small, "encoding")
    return describe(small, "processor")


# The model: built, every parameter drawn at random, run on each path.


def _build(small: ModelConfig, seed: int):
    import torch

    from .model import build_model

    torch.random.default_generator.manual_seed(seed)
    model = build_model(small)
    for layer in _layers(model):
        layer.fused = False  # the CPU paths; the fused kernels are checked against them by their own tests
    return model


def _layers(model) -> list:
    """The model's attention layers (CausalSelfAttention), first to last."""
    from .attention import CausalSelfAttention

    return [module for module in model.modules() if isinstance(module, CausalSelfAttention)]


def _random_model(small: ModelConfig, seed: int):
    """The model with every parameter redrawn from a normal distribution: N(0, 1/fan_in) for matrices and
    kernels, N(0, 0.5²) for vectors and scalars (biases, norms, gates: one that starts at zero is open)."""
    import torch

    model = _build(small, seed)
    generator = torch.Generator().manual_seed(1000 + seed)
    with torch.no_grad():
        for parameter in model.parameters():
            fan_in = parameter[0].numel() if parameter.dim() >= 2 else 0
            std = fan_in**-0.5 if fan_in else 0.5
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * std)
    return model


def _tokens(small: ModelConfig, seed: int) -> torch.Tensor:
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, small.vocab_size, (1, LENGTH), generator=generator)


PATHS = (("training, direct", True, None), (f"training, blocks of {TRAIN_BLOCK_ROWS} rows", True, TRAIN_BLOCK_ROWS),
         ("evaluation, direct", False, None), (f"evaluation, blocks of {EVAL_BLOCK_ROWS} rows", False, EVAL_BLOCK_ROWS))


def _run(model, tokens: torch.Tensor, training: bool, rows: int | None, tail: int | None = None) -> torch.Tensor:
    """[B, T, vocab] logits on one path: training mode with gradients, or evaluation without; blocks of `rows`."""
    import torch

    model.train(training)
    for layer in _layers(model):
        layer.train_block_rows = rows if training else None
        layer.eval_block_rows = None if training else rows
    torch.random.default_generator.manual_seed(7)  # randomized positions (randomized RoPE's training mode): the
    # same on every path (the CPU's generator alone: torch.manual_seed's CUDA bookkeeping costs more than a forward)
    with torch.set_grad_enabled(training):
        logits = model(tokens, tail=tail) if tail is not None else model(tokens)
    return logits.float()


def _path_problems(model, tokens: torch.Tensor, causal: bool) -> list[tuple[str, str]]:
    """(check, what failed) over every path: finite logits, causality (when checked), blocks equal direct.
    One forward per path: its batch holds the sequence once per gradient cut (training) or the sequence and
    its copies with one probed token changed (evaluation)."""
    problems: list[tuple[str, str]] = []
    direct: dict[bool, torch.Tensor] = {}
    probed = _probed(tokens, model.cfg.vocab_size)
    for name, training, rows in PATHS:
        batch = tokens.expand(len(CUTS), -1) if training else probed
        captured: list[torch.Tensor] = []
        handle = model.embed.register_forward_hook(lambda module, args, output: captured.append(output))
        try:
            logits = _run(model, batch, training, rows)
        finally:
            handle.remove()
        plain = logits[0].detach()
        if not bool(plain.isfinite().all()):
            row = int((~plain.isfinite()).any(-1).nonzero()[0, 0])
            problems.append(("build", f"{name}: the logits are not finite (first at position {row})"))
            continue
        if rows is None:
            direct[training] = plain
        elif training in direct:
            problems += _differs(name, plain, direct[training])
        if causal and training:
            problems += _gradient_leak(name, logits, captured[-1])
        elif causal:
            problems += _perturbation_leak(name, logits.detach())
    if False in direct:
        tail = _run(model, tokens, False, None, tail=TAIL)[0]
        problems += _differs(f"evaluation, last {TAIL} rows (tail)", tail.detach(), direct[False][-TAIL:],
                             offset=LENGTH - TAIL)
    return problems


def _probed(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    """The sequence, then one copy per probe with the token at the probe changed: [1 + len(PROBES), T]."""
    batch = tokens.expand(1 + len(PROBES), -1).clone()
    for index, probe in enumerate(PROBES, 1):
        batch[index, probe] = (batch[index, probe] + 1 + probe) % vocab
    return batch


def _differs(name: str, logits: torch.Tensor, direct: torch.Tensor, offset: int = 0) -> list[tuple[str, str]]:
    scale = direct.abs().max().item() or 1.0
    gap = (logits - direct).abs().amax(-1)
    if gap.max().item() <= PATH_TOLERANCE * scale:
        return []
    row = int((gap > PATH_TOLERANCE * scale).nonzero()[0, 0]) + offset
    return [("block path", f"{name}: the logits differ from the direct path's by up to {gap.max().item():.3g} "
                           f"(logits' scale {scale:.3g}, tolerance {PATH_TOLERANCE:g} of it), first at position "
                           f"{row}: its logits read rows or keys beyond the row_halo / key_halo it declares "
                           "(ScoreProcessor.row_halo, key_halo)")]


def _perturbation_leak(name: str, logits: torch.Tensor) -> list[tuple[str, str]]:
    """Batch row 0 the sequence, row i its copy with the token at PROBES[i - 1] changed: no logit before the
    probe may move."""
    reference = logits[0]
    scale = reference.abs().max().item() or 1.0
    for index, probe in enumerate(PROBES, 1):
        moved = (logits[index, :probe] - reference[:probe]).abs().amax(-1)
        if (moved > CAUSAL_TOLERANCE * scale).any():
            first = int((moved > CAUSAL_TOLERANCE * scale).nonzero()[0, 0])
            return [("causality", f"{name}: the logits at position {first} changed (by {moved[first].item():.3g}) "
                                  f"when the token at the later position {probe} changed: it reads the future")]
    return []


def _gradient_leak(name: str, logits: torch.Tensor, embedded: torch.Tensor) -> list[tuple[str, str]]:
    """d logits[t] / d embedding[s] == 0 for every s > t: batch row b's logits up to CUTS[b] (weighted at
    random) against its embeddings after the cut, all cuts in one backward pass."""
    import torch

    weights = torch.randn(logits.shape, generator=torch.Generator().manual_seed(3))
    for index, cut in enumerate(CUTS):
        weights[index, cut + 1 :] = 0
    (grad,) = torch.autograd.grad((logits * weights).sum(), embedded)
    for index, cut in enumerate(CUTS):
        per_token = grad[index].abs().amax(-1)
        scale = per_token[: cut + 1].max().item() or 1.0
        later = per_token[cut + 1 :] > CAUSAL_TOLERANCE * scale
        if later.any():
            position = cut + 1 + int(later.nonzero()[0, 0])
            return [("causality", f"{name}: the gradient of the logits at positions 0..{cut} with respect to the "
                                  f"embedding at the later position {position} is {per_token[position].item():.3g}, "
                                  "not 0: a logit depends on a later token")]
    return []


# The records' numbers against the built module.


def _parameter_refusals(small: ModelConfig) -> list[Refusal]:
    model = _build(small, 0)
    built, analytic = model.num_parameters(), small.num_parameters()
    if built == analytic:
        return []
    layer = _layers(model)[0]
    refusals = []
    processor = layer.processor
    if processor is not None:
        declared = small.processor_facts.cost(small).parameters
        actual = sum(parameter.numel() for parameter in processor.parameters())
        if declared != actual:
            refusals.append(Refusal(describe(small, "processor"), "parameters",
                                    f"Cost.parameters says {declared} per layer, the built module has {actual} "
                                    f"(its cost function must count every parameter of the module it builds)"))
    encodings = {id(layer.pos): layer.pos for layer in _layers(model)}.values()
    actual = sum(parameter.numel() for encoding in encodings for parameter in encoding.parameters())
    declared = small.encoding.learned(small) * (1 if small.encoding.shared else small.n_layer)
    if declared != actual:
        refusals.append(Refusal(describe(small, "encoding"), "parameters",
                                f"its record's `learned` says {declared}, the built module has {actual}"))
    return refusals or [Refusal(describe(small), "parameters", f"the analytic count is {analytic}, the built "
                                                                f"model has {built}")]


def measured_macs(small: ModelConfig) -> tuple[float, float]:
    """(declared, measured) multiply-adds per score-map entry of `small`'s processor: its record's Cost.macs,
    and torch.utils.flop_counter's count of one forward over a LENGTH x LENGTH map, halved."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from .processors.base import convolutions

    model = _build(small, 0).eval()
    layer = _layers(model)[0]
    positions = torch.arange(LENGTH)
    scores = torch.randn(1, small.n_head, LENGTH, LENGTH, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        bias = layer.pos.bias(positions, positions)
        counter = FlopCounterMode(display=False)
        with counter, convolutions():  # the formulation Cost.macs counts (the CPU GEMM path skips zero blocks)
            layer.processor(scores, bias, positions, positions)
    return small.processor_facts.cost(small).macs, counter.get_total_flops() / 2 / LENGTH**2


def _cost_refusals(small: ModelConfig) -> list[Refusal]:
    if not small.processor_facts.present:
        return []
    declared, measured = measured_macs(small)
    if measured == 0 or measured / COST_FACTOR <= declared <= measured * COST_FACTOR:
        return []
    return [Refusal(describe(small, "processor"), "cost",
                    f"Cost.macs says {declared:g} multiply-adds per score-map entry, the forward measures "
                    f"{measured:g} ({declared / measured:.3g}x; within {COST_FACTOR:g}x is accepted): plan's FLOPs "
                    "and durations rest on it")]


def _determinism_refusals(small: ModelConfig) -> list[Refusal]:
    import torch

    tokens = _tokens(small, 0)
    first, second = (_run(_build(small, 0), tokens, False, None)[0] for _ in range(2))
    if torch.equal(first, second):
        return []
    gap = (first - second).abs().amax(-1)
    row = int((gap > 0).nonzero()[0, 0])
    return [Refusal(describe(small), "determinism",
                    f"two models built with one seed differ by {gap.max().item():.3g} (first at position {row}): "
                    "draw every random number from torch's generator (no numpy/random, no unseeded generator)")]


def timed(model: ModelConfig) -> tuple[list[Refusal], float]:
    """(refusals, seconds): the contract and how long it took (tests/benchmarks/bench_contract.py)."""
    start = time.perf_counter()
    found = refusals(model)
    return found, time.perf_counter() - start


__all__ = ["CHECKS", "COST_FACTOR", "Refusal", "describe", "key", "leak_refusal", "measured_macs", "refusals",
           "small_config", "timed"]

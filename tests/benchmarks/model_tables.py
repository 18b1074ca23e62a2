"""Whole-model tables of bench_attention.py: a training step (with AdamW) and evaluation of a whole model,
Kerple against DAPE 1x3-Kerple on each of dape_core's paths and against the papers' formulation, eager and
compiled, in the same run, with ratios to Kerple.

Variants (all Kerple biases, D = 32, the same weights for a given seed):
- Kerple: no processor (PyTorch's fused attention with the bias as a mask).
- DAPE1x3 direct / block / fused: dape_core's reference-formulation path, its row-block path
  (`attention_block_size`; on CUDA the rows come from a memory budget) and its fused Triton path.
- papers' formulation: every layer's attention replaced by `reference_formulation.reference_attention`
  (concat, tril, two Conv2d over the full T x T map), as the authors compute it.
Weights stay float32; a bfloat16 or float16 `--dtype` runs under autocast (how the project trains). The models,
steps and timing are `orchestrator doctor`'s benchmark's (dape_core/doctor/benchmark.py), which this extends.
"""

from __future__ import annotations

from functools import partial

import torch
from reference_formulation import reference_attention
from tabulate import tabulate

from dape_core.doctor import benchmark

TRAIN_VARIANTS = ("Kerple", "DAPE1x3 direct", "DAPE1x3 block", "DAPE1x3 fused", "papers' formulation")
EVAL_VARIANTS = ("Kerple", "DAPE1x3 block", "DAPE1x3 fused")
GIB, MIB = 2**30, 2**20


def fused_possible(device: torch.device) -> str | None:
    """Why the fused variant cannot run here, or None."""
    return benchmark.not_applicable("DAPE1x3 fused", device)


def build(args, label: str, training: bool) -> torch.nn.Module:
    """`orchestrator doctor`'s benchmark model of the variant (dape_core.doctor.benchmark), or the papers'
    formulation: the direct path's model with every layer's attention replaced."""
    variant = "DAPE1x3 direct" if label == "papers' formulation" else label
    model = benchmark.build_variant(variant, args.device, training, preset=args.model_preset, vocab_size=50257,
                                    block_rows=args.block_size)
    if label == "papers' formulation":
        for block in model.blocks:
            block.attn.forward = partial(lambda layer, x, positions: reference_attention(layer, x), block.attn)
    return model


def measure(step, args, peak_memory) -> dict:
    """Median seconds of `args.model_reps` steps after `args.model_warmup` (compilation happens there); on
    CUDA also the peak allocated memory of the timed steps (weights and optimizer state included)."""
    benchmark.warm_up(step, args.model_warmup, args.device)
    if peak_memory is not None:  # the memory process (CPU): one step, peak resident size above the start
        return {"peak": peak_memory(step)}
    seconds, peak = benchmark.time_steps(step, args.model_reps, args.device)
    return {"time": seconds, **({"peak": peak} if peak is not None else {})}


def train_case(args, batch: int, length: int, label: str, compiled: bool, peak_memory=None) -> dict:
    model = build(args, label, training=True)
    runner = torch.compile(model) if compiled else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, 50257, (batch, length + 1), generator=torch.Generator().manual_seed(length))
    return measure(benchmark.train_step(runner, optimizer, tokens.to(args.device), args.dtype, args.device), args,
                   peak_memory)


def eval_case(args, length: int, label: str, compiled: bool = False, peak_memory=None) -> dict:
    model = build(args, label, training=False)
    runner = torch.compile(model) if compiled else model
    tokens = torch.randint(0, 50257, (1, length), generator=torch.Generator().manual_seed(length)).to(args.device)
    return measure(benchmark.eval_step(runner, tokens, args.dtype, args.device), args, peak_memory)


def guarded(case, *arguments, **options) -> dict:
    """A case's result, or why it has none (out of memory, a failure of its path), with the device's memory
    freed after: one failing case leaves the others' figures."""
    result, note = benchmark.guarded(lambda: case(*arguments, **options), limit=160)
    return result if result is not None else {"error": note}


def run(args, peak_memory=None, progress=print) -> dict[str, dict]:
    """Every whole-model case, keyed 'train|BxT|mode|variant' and 'eval|T|mode|variant'."""
    results = {}
    skip_fused = fused_possible(args.device)
    for mode in args.model_modes:
        compiled = mode == "compiled"
        for batch, length in args.model_shapes:
            for label in TRAIN_VARIANTS:
                key = f"train|{batch}x{length}|{mode}|{label}"
                if compiled and label not in args.compile_variants:
                    results[key] = {"error": "not compiled (--compile-variants)"}
                elif label.endswith("fused") and skip_fused:
                    results[key] = {"error": skip_fused}
                else:
                    results[key] = guarded(train_case, args, batch, length, label, compiled, peak_memory)
                progress(key, results[key])
    for length in args.model_eval_lengths:
        for label in EVAL_VARIANTS:
            key = f"eval|{length}|eager|{label}"
            if label.endswith("fused") and skip_fused:
                results[key] = {"error": skip_fused}
            else:
                results[key] = guarded(eval_case, args, length, label, False, peak_memory)
            progress(key, results[key])
    return results


def _row(key: str, times: dict, peaks: dict, baseline_key: str) -> list:
    t, m, base_t, base_m = times[key], peaks.get(key, {}), times[baseline_key], peaks.get(baseline_key, {})
    seconds, peak = t.get("time"), t.get("peak", m.get("peak"))
    base_seconds, base_peak = base_t.get("time"), base_t.get("peak", base_m.get("peak"))
    return [1e3 * seconds if seconds else None, seconds / base_seconds if seconds and base_seconds else None,
            peak / MIB if peak else None, peak / base_peak if peak and base_peak else None,
            t.get("error", m.get("error", ""))]


def print_tables(args, times: dict, peaks: dict) -> None:
    """Training and evaluation tables; peaks come with the times on CUDA and from the memory process on CPU."""
    memory_note = ("peak allocated, weights and AdamW state included" if args.device.type == "cuda"
                   else "peak resident size above the start of a step")
    if args.model_shapes:
        print(f"## Whole {args.model_preset} model (vocab 50257), training step with AdamW, {args.dtype} "
              f"({'autocast, float32 weights' if args.dtype != torch.float32 else 'float32'}); "
              f"median of {args.model_reps} after {args.model_warmup} warm-ups; memory: {memory_note}\n")
        table = []
        for mode in args.model_modes:
            for batch, length in args.model_shapes:
                base = f"train|{batch}x{length}|{mode}|Kerple"
                for label in TRAIN_VARIANTS:
                    key = f"train|{batch}x{length}|{mode}|{label}"
                    table.append([f"{batch} x {length}", mode, label, *_row(key, times, peaks, base)])
        print(tabulate(table, floatfmt=".3g", missingval="-", headers=[
            "batch x T", "mode", "variant", "ms", "x Kerple", "MiB", "memory x Kerple", "note"]))
        print()
    if args.model_eval_lengths:
        print(f"## Whole {args.model_preset} model, evaluation (no gradients, eager), batch 1, {args.dtype}; "
              f"memory: {memory_note}\n")
        table = []
        for length in args.model_eval_lengths:
            base = f"eval|{length}|eager|Kerple"
            for label in EVAL_VARIANTS:
                table.append([length, label, *_row(f"eval|{length}|eager|{label}", times, peaks, base)])
        print(tabulate(table, floatfmt=".3g", missingval="-", headers=[
            "T", "variant", "ms", "x Kerple", "MiB", "memory x Kerple", "note"]))
        print()

"""Whole-model tables of bench_attention.py: a training step (with AdamW) and evaluation of a whole model,
Kerple against DAPE 1x3-Kerple on each of dape_core's paths and against the papers' formulation, eager and
compiled, in the same run, with ratios to Kerple.

Variants (all Kerple biases, D = 32, the same weights for a given seed):
- Kerple: no processor (PyTorch's fused attention with the bias as a mask).
- DAPE1x3 direct / block / fused: dape_core's reference-formulation path, its row-block path
  (`attention_block_size`; on CUDA the rows come from a memory budget) and its fused Triton path.
- papers' formulation: every layer's attention replaced by `reference_formulation.reference_attention`
  (concat, tril, two Conv2d over the full T x T map), as the authors compute it.
Weights stay float32; a bfloat16 or float16 `--dtype` runs under autocast (how the project trains).
"""

from __future__ import annotations

import gc
import statistics
import time
from contextlib import nullcontext
from functools import partial

import torch
from tabulate import tabulate

from dape_core import ModelConfig, build_model
from reference_formulation import reference_attention

TRAIN_VARIANTS = ("Kerple", "DAPE1x3 direct", "DAPE1x3 block", "DAPE1x3 fused", "papers' formulation")
EVAL_VARIANTS = ("Kerple", "DAPE1x3 block", "DAPE1x3 fused")
GIB, MIB = 2**30, 2**20


def fused_possible(device: torch.device) -> str | None:
    """Why the fused variant cannot run here, or None."""
    from dape_core import fused

    if device.type != "cuda":
        return "fused: CUDA only (on CPU Triton's interpreter is far too slow to time)"
    return fused.cannot_run(device)


def build(args, label: str) -> torch.nn.Module:
    overrides = {"processor": "none"} if label == "Kerple" else {"processor": "dapev2", "kernel_size": 3}
    cfg = ModelConfig(preset=args.model_preset, vocab_size=50257, pos_encoding="kerple", d_dape=32,
                      attention_block_size=args.block_size if label.endswith("block") else None, **overrides)
    torch.manual_seed(0)
    model = build_model(cfg).to(args.device)
    for block in model.blocks:
        attn = block.attn
        if label != "Kerple":
            attn.fused = label.endswith("fused")
        if label == "papers' formulation":
            attn.forward = partial(lambda layer, x, positions: reference_attention(layer, x), attn)
    return model


def autocast(args):
    if args.dtype == torch.float32:
        return nullcontext()
    return torch.autocast(args.device.type, dtype=args.dtype)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(step, args, peak_memory) -> dict:
    """Median seconds of `args.model_reps` steps after `args.model_warmup` (compilation happens there); on
    CUDA also the peak allocated memory of the timed steps (weights and optimizer state included)."""
    for _ in range(args.model_warmup):
        step()
    _sync(args.device)
    if peak_memory is not None:  # the memory process (CPU): one step, peak resident size above the start
        return {"peak": peak_memory(step)}
    if args.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.model_reps):
        start = time.perf_counter()
        step()
        _sync(args.device)
        times.append(time.perf_counter() - start)
    result = {"time": statistics.median(times)}
    if args.device.type == "cuda":
        result["peak"] = torch.cuda.max_memory_allocated()
    return result


def train_case(args, batch: int, length: int, label: str, compiled: bool, peak_memory=None) -> dict:
    model = build(args, label).train()
    runner = torch.compile(model) if compiled else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, 50257, (batch, length + 1), generator=torch.Generator().manual_seed(length))
    tokens = tokens.to(args.device)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with autocast(args):
            _, loss = runner(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        optimizer.step()

    return measure(step, args, peak_memory)


def eval_case(args, length: int, label: str, compiled: bool = False, peak_memory=None) -> dict:
    model = build(args, label).eval()
    runner = torch.compile(model) if compiled else model
    tokens = torch.randint(0, 50257, (1, length), generator=torch.Generator().manual_seed(length)).to(args.device)

    def step():
        with torch.no_grad(), autocast(args):
            runner(tokens)

    return measure(step, args, peak_memory)


def guarded(case, *arguments, **options) -> dict:
    """A case's result, or why it has none (out of memory, a failure of its path), with the device's memory
    freed after: one failing case leaves the others' figures."""
    try:
        return case(*arguments, **options)
    except torch.OutOfMemoryError:
        return {"error": "out of memory"}
    except Exception as error:  # noqa: BLE001 - reported in the table, the run goes on
        return {"error": f"{type(error).__name__}: {error}"[:160].replace("\n", " ")}
    finally:
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


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

"""Speed and memory of dape_core's attention against the reference formulation, measured in the same run.

    python tests/benchmarks/bench_attention.py                  # CPU, float32, all tables, scaled down
    python tests/benchmarks/bench_attention.py --threads 1 --clock cpu   # steadier on a machine shared with others
    python tests/benchmarks/bench_attention.py --device cuda --dtype bfloat16 --no-float64-check \
        --train-lengths 512 1024 2048 --eval-lengths 8192 16384   # a GPU: the issue's tables (~10 min on an H200)

Four tables:
1. One attention layer (qkv projection, position encoding, processor, softmax, ·V, output projection) for
   each shape, training step (forward + backward), batch 1: time and peak memory. dape_core runs the path it
   chooses: on CUDA with Triton the fused kernels (`dape_core.fused`), elsewhere its training block path
   (`attention_block_size`, per-block recomputation). The reference formulation is re-implemented here
   (reference_formulation.py) with the same weights: concat over heads, tril, two Conv2d over the full T x T
   map (for Kerple alone: S + B materialised, mask, softmax). Ratios are ours / reference. `out max|Δ|` is
   the largest difference of the layer's outputs, `grad rel` the largest relative difference (by norm) of
   the gradients of the input and every parameter (see `difference`), `f64 max|Δ|` the largest difference of
   outputs and all gradients when both run in float64 (--no-float64-check skips it): the two compute the
   same function.
2. The same layer, forward without gradients (evaluation): peak memory, where dape_core switches to its block
   path (or the fused kernels) by itself. The reference is skipped where its projected peak exceeds
   --max-reference-gib.
3. A whole model (vocab 50257; 125M on CUDA), training step with AdamW, batch > 1, weights in float32 and a
   bfloat16 --dtype as autocast: Kerple against DAPE 1x3-Kerple on dape_core's direct, block and fused paths
   and against the papers' formulation at model level, eager and torch.compile'd, median of 10 steps after 3
   warm-ups (on CUDA), time and peak memory with ratios to Kerple (model_tables.py).
4. The same models evaluating (no gradients), batch 1, long sequences (8192 and 16384 on CUDA).

Peak memory: on CUDA `torch.cuda.max_memory_allocated` (tables 1 and 2 above the memory in use before the
step, in a second process started by this one; tables 3 and 4 in this process, the whole peak); on CPU
the peak resident set size (Linux VmHWM, reset through /proc/self/clear_refs before each measurement)
above the resident size before it, measured in a second process started by this one with glibc told to
return every allocation over 64 KiB to the system on free (MALLOC_MMAP_THRESHOLD_), so that the resident
size follows the live tensors. That setting makes every allocation a fresh mapping, which slows small
allocations down, so times are measured in this process, with the default allocator.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

import model_tables
import torch
from reference_formulation import reference_attention
from tabulate import tabulate

from dape_core import ModelConfig
from dape_core.attention import CausalSelfAttention
from dape_core.encodings.base import build_position_encoding

GIB, MIB = 2**30, 2**20
VARIANTS = {  # label -> ModelConfig overrides
    "Kerple": {"processor": "none"},
    "DAPE": {"processor": "dape"},
    "DAPE 1x3": {"processor": "dapev2", "kernel_size": 3},
    "DAPE 1x5": {"processor": "dapev2", "kernel_size": 5},
}
SHAPES = ("125M", "small")  # 125M-shaped (H=12, d=64) and the CPU preset (H=4, d=32); D = 32 for both
CLOCK = time.perf_counter


# ---------------------------------------------------------------- measuring
class PeakMemory:
    """Peak bytes in use during a `with` block, above what was in use when it began."""

    def __init__(self, device: torch.device):
        self.device = device
        self.peak = 0

    @staticmethod
    def _status_bytes(key: str) -> int:
        with open("/proc/self/status") as status:
            return 1024 * int(re.search(rf"{key}:\s+(\d+) kB", status.read()).group(1))

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.start = torch.cuda.memory_allocated()
        else:
            with open("/proc/self/clear_refs", "w") as refs:
                refs.write("5")  # resets VmHWM to the current resident size
            self.start = self._status_bytes("VmRSS")
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated() - self.start
        else:
            self.peak = self._status_bytes("VmHWM") - self.start


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device: torch.device, reps: int) -> tuple[float, object]:
    """(median seconds of `reps` calls after one warm-up, or of the warm-up alone when reps = 0; warm-up result)."""
    start = CLOCK()
    result = fn()
    synchronize(device)
    times = [] if reps else [CLOCK() - start]
    for _ in range(reps):
        start = CLOCK()
        fn()
        synchronize(device)
        times.append(CLOCK() - start)
    return statistics.median(times), result


def peak_bytes(fn, device: torch.device) -> int:
    with PeakMemory(device) as memory:
        fn()
    return memory.peak


def make_layer(shape: str, variant: str, block: int, device, dtype) -> CausalSelfAttention:
    cfg = ModelConfig(preset=shape, pos_encoding="kerple", d_dape=32, attention_block_size=block, **VARIANTS[variant])
    torch.manual_seed(0)
    return CausalSelfAttention(cfg, build_position_encoding(cfg)).to(device=device, dtype=dtype)


def difference(ours: list[torch.Tensor], reference: list[torch.Tensor]) -> tuple[float, float | None]:
    """(max |Δ| of the outputs (the first tensor); the largest ‖Δ‖ / ‖reference‖ over the gradients).

    Gradients are compared by norm: where a pre-activation of the processor lies within float32 rounding
    of zero, the two formulations may put it on different sides of LeakyReLU's kink, and that entry's
    gradient then differs by a factor 100 in one place (float64 runs of both agree to 1e-13). Gradients
    whose exact value is zero are left out (conv_out's bias: softmax gradients sum to zero along each row)."""
    out = (ours[0].float() - reference[0].float()).abs().max().item()
    norms = [(a.float() - b.float()).norm().item() / b.float().norm().item()
             for a, b in zip(ours[1:], reference[1:]) if b.float().abs().max() > 1e-4]
    return out, (max(norms) if norms else None)


# ---------------------------------------------------------------- cases: one measurement each
def layer_train_case(args, shape, length, variant, memory: bool, dtype: torch.dtype | None = None) -> dict:
    dtype = dtype or args.dtype
    layer = make_layer(shape, variant, args.block_size, args.device, dtype).train()
    width = layer.proj.in_features
    generator = torch.Generator().manual_seed(length)
    x = torch.randn(1, length, width, generator=generator).to(args.device, dtype).requires_grad_()
    target_dtype = torch.promote_types(dtype, torch.float32)
    target = torch.randn(1, length, width, generator=generator).to(args.device, target_dtype)
    positions = torch.arange(length, device=args.device)

    def step(forward):
        layer.zero_grad(set_to_none=True)
        x.grad = None
        out = forward(x)
        (out.to(target.dtype) * target).sum().backward()
        return [out.detach(), x.grad] + [p.grad for p in layer.parameters() if p.grad is not None]

    def ours():
        return step(lambda t: layer(t, positions))

    def reference():
        return step(lambda t: reference_attention(layer, t))

    if memory:
        return {"ours": peak_bytes(ours, args.device), "ref": peak_bytes(reference, args.device)}
    if dtype == torch.float64:  # the exactness check: no timing
        return {"f64": max((a - b).abs().max().item() for a, b in zip(ours(), reference()))}
    ours_s, ours_out = timed(ours, args.device, args.reps)
    ref_s, ref_out = timed(reference, args.device, args.reps)
    result = {"ours": ours_s, "ref": ref_s, "diff": difference(ours_out, ref_out)}
    if args.float64_check:
        result.update(layer_train_case(args, shape, length, variant, memory=False, dtype=torch.float64))
    return result


def layer_eval_case(args, shape, length, variant, memory: bool, with_reference: bool) -> dict:
    layer = make_layer(shape, variant, args.block_size, args.device, args.dtype).eval()
    x = torch.randn(1, length, layer.proj.in_features, generator=torch.Generator().manual_seed(length))
    x = x.to(args.device, args.dtype)
    positions = torch.arange(length, device=args.device)
    with torch.no_grad():
        if memory:
            result = {"ours": peak_bytes(lambda: layer(x, positions), args.device)}
            if with_reference:
                result["ref"] = peak_bytes(lambda: reference_attention(layer, x), args.device)
            return result
        ours_s, ours_out = timed(lambda: layer(x, positions), args.device, reps=1)
        result = {"ours": ours_s}
        if with_reference:
            result["ref"], ref_out = timed(lambda: reference_attention(layer, x), args.device, reps=0)
            result["diff"] = difference([ours_out], [ref_out])
        return result


def reference_fits(args, shape: str, length: int, variant: str, measured: dict[int, int]) -> bool:
    """Whether the evaluation reference's projected peak stays under --max-reference-gib. Its maps grow as
    T², so the projection is its measured peak at the previous length times the squared length ratio; with
    nothing measured yet, the analytic size of its maps (S, B, S + B, weights; and z, hidden, f for DAPE)."""
    if measured:
        last = max(measured)
        projected = measured[last] * (length / last) ** 2
    else:
        heads = ModelConfig(preset=shape).n_head
        floats_per_entry = 4 * heads + (0 if variant == "Kerple" else 3 * heads + 2 * 32)
        projected = floats_per_entry * length**2 * torch.finfo(args.dtype).bits // 8
    return projected <= args.max_reference_gib * GIB


def run_cases(args, peaks: dict | None = None) -> dict[str, dict]:
    """Every measurement of the three tables, keyed by a readable name. Without `peaks` this is the memory
    process, which also decides which evaluation references run; with them, times (and the same references)."""
    memory = peaks is None
    results = {}
    for shape in args.shapes:
        for length in args.train_lengths:
            for variant in args.variants:
                results[f"train|{shape}|{length}|{variant}"] = layer_train_case(args, shape, length, variant, memory)
                progress("train", shape, length, variant, results, memory)
    for shape in args.shapes:
        for variant in args.variants:
            measured: dict[int, int] = {}
            for length in args.eval_lengths:
                key = f"eval|{shape}|{length}|{variant}"
                if memory:
                    with_reference = reference_fits(args, shape, length, variant, measured)
                else:
                    with_reference = "ref" in peaks[key]
                results[key] = layer_eval_case(args, shape, length, variant, memory, with_reference)
                if memory and with_reference:
                    measured[length] = results[key]["ref"]
                progress("eval", shape, length, variant, results, memory)
    if memory and args.device.type == "cuda":
        return results  # the whole-model cases measure their CUDA peaks in the timing process
    peak_memory = (lambda fn: peak_bytes(fn, args.device)) if memory else None
    for key, result in model_tables.run(args, peak_memory, progress=model_progress).items():
        results[f"model|{key}"] = result
    return results


def warm_up(args) -> None:
    """Run every kind of case once at a short length, so that one-time allocations (thread pools, oneDNN's
    kernels) do not count against the first measurement."""
    for variant in args.variants:
        layer_train_case(args, args.shapes[0], 64, variant, memory=True)
        layer_eval_case(args, args.shapes[0], 64, variant, memory=True, with_reference=True)


def progress(table, shape, length, variant, results, memory: bool) -> None:
    result = results[f"{table}|{shape}|{length}|{variant}"]
    unit = (lambda b: f"{b / MIB:.0f} MiB") if memory else (lambda s: f"{1e3 * s:.0f} ms")
    text = ", ".join(f"{who} {unit(value)}" for who, value in result.items() if who in ("ours", "ref"))
    print(f"  [{'memory' if memory else 'time'}] {table} {shape} T={length} {variant}: {text}",
          file=sys.stderr, flush=True)


def model_progress(key: str, result: dict) -> None:
    text = ", ".join(f"{name} {1e3 * value:.0f} ms" if name == "time" else
                     f"{name} {value / MIB:.0f} MiB" if name == "peak" else f"{name}: {value}"
                     for name, value in result.items())
    print(f"  [model] {key}: {text}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- tables
def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def print_tables(args, times: dict, peaks: dict) -> None:
    def rows(table: str, shape: str, lengths, labels):
        for length in lengths:
            for label in labels:
                key = f"{table}|{shape}|{length}|{label}"
                yield length, label, times[key], peaks[key]

    if args.train_lengths:
        print("## One attention layer, training step (forward + backward), batch 1\n")
        table = []
        for shape in args.shapes:
            for length, variant, t, m in rows("train", shape, args.train_lengths, args.variants):
                table.append([shape, length, variant, 1e3 * t["ours"], 1e3 * t["ref"], ratio(t["ours"], t["ref"]),
                              m["ours"] / MIB, m["ref"] / MIB, ratio(m["ours"], m["ref"]), *t["diff"], t.get("f64")])
        print(tabulate(table, floatfmt=".3g", missingval="-", headers=[
            "shape", "T", "variant", "ours ms", "ref ms", "time ratio", "ours MiB", "ref MiB", "memory ratio",
            "out max|Δ|", "grad rel", "f64 max|Δ|"]))
        print()
    if args.eval_lengths:
        print("## One attention layer, forward without gradients (evaluation), batch 1\n")
        table = []
        for shape in args.shapes:
            for length, variant, t, m in rows("eval", shape, args.eval_lengths, args.variants):
                has_ref = "ref" in m
                table.append([shape, length, variant, 1e3 * t["ours"], 1e3 * t["ref"] if has_ref else None,
                              m["ours"] / MIB, m["ref"] / MIB if has_ref else None,
                              ratio(m["ours"], m.get("ref")), t["diff"][0] if has_ref else None,
                              "" if has_ref else f"reference skipped (> {args.max_reference_gib:g} GiB projected)"])
        print(tabulate(table, floatfmt=".3g", missingval="-", headers=[
            "shape", "T", "variant", "ours ms", "ref ms", "ours MiB", "ref MiB", "memory ratio", "out max|Δ|", "note"]))
        print()
    model_keys = [key for key in times if key.startswith("model|")]
    model_tables.print_tables(args, {key[6:]: times[key] for key in model_keys},
                              {key[6:]: peaks[key] for key in model_keys if key in peaks})


# ---------------------------------------------------------------- entry point
def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--block-size", type=int, default=64, help="attention_block_size of the training path")
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions after one warm-up (median)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="cpu: this process's CPU time (with --threads 1 on a machine shared with other jobs)")
    parser.add_argument("--train-lengths", type=int, nargs="*", default=[256, 512, 1024])
    parser.add_argument("--eval-lengths", type=int, nargs="*", default=[2048, 4096, 8192])
    parser.add_argument("--model-preset", default=None, help="whole-model tables (default: 125M on CUDA, small on CPU)")
    parser.add_argument("--model-shapes", nargs="*", default=None, metavar="BxT",
                        help="training batch x length (default: 16x512 8x1024 8x2048 on CUDA, 4x256 2x512 on CPU)")
    parser.add_argument("--model-eval-lengths", type=int, nargs="*", default=None,
                        help="evaluation lengths, batch 1 (default: 8192 16384 on CUDA, 2048 4096 on CPU)")
    parser.add_argument("--model-modes", nargs="*", default=None, choices=["eager", "compiled"],
                        help="eager and/or torch.compile (default: both on CUDA, eager on CPU)")
    parser.add_argument("--compile-variants", nargs="*", default=["Kerple", "DAPE1x3 fused", "DAPE1x3 direct"],
                        choices=list(model_tables.TRAIN_VARIANTS), help="the variants compiled in 'compiled' mode "
                        "(compiling a 125M model takes about a minute each)")
    parser.add_argument("--model-reps", type=int, default=None, help="timed steps (default: 10 on CUDA, 3 on CPU)")
    parser.add_argument("--model-warmup", type=int, default=None, help="warm-up steps (default: 3 on CUDA, 1 on CPU)")
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--max-reference-gib", type=float, default=10.0,
                        help="skip evaluation references projected above this (the machine is shared)")
    parser.add_argument("--no-float64-check", dest="float64_check", action="store_false",
                        help="skip re-running each training case in float64 to compare ours and the reference exactly")
    parser.add_argument("--memory-only", action="store_true", help=argparse.SUPPRESS)  # the memory process
    args = parser.parse_args(argv)
    if args.clock == "cpu" and args.device != "cpu":
        parser.error("--clock cpu measures CPU time: only with --device cpu")
    args.device, args.dtype = torch.device(args.device), getattr(torch, args.dtype)
    cuda = args.device.type == "cuda"
    defaults = {"model_preset": "125M" if cuda else "small",
                "model_shapes": ["16x512", "8x1024", "8x2048"] if cuda else ["4x256", "2x512"],
                "model_eval_lengths": [8192, 16384] if cuda else [2048, 4096],
                "model_modes": ["eager", "compiled"] if cuda else ["eager"],
                "model_reps": 10 if cuda else 3, "model_warmup": 3 if cuda else 1}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    try:
        args.model_shapes = [tuple(int(n) for n in shape.lower().split("x")) for shape in args.model_shapes]
    except ValueError:
        parser.error(f"--model-shapes: expected BATCHxLENGTH items such as 16x512, got {args.model_shapes}")
    return args


def measure_memory_in_child(argv: list[str]) -> dict:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    proc = subprocess.run([sys.executable, __file__, *argv, "--memory-only"], env=env, stdout=subprocess.PIPE,
                          text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    argv = sys.argv[1:]
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.memory_only:
        warm_up(args)
        print(json.dumps(run_cases(args)))
        return
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    started = time.perf_counter()
    peaks = measure_memory_in_child(argv)
    times = run_cases(args, peaks)
    print(f"device {args.device}, {args.dtype}, {torch.get_num_threads()} threads, {args.clock} clock, "
          f"torch {torch.__version__}, training block size {args.block_size}, median of {args.reps} after a warm-up; "
          "ratios are ours / reference\n")
    print_tables(args, times, peaks)
    print(f"\n{time.perf_counter() - started:.0f} s in all")


if __name__ == "__main__":
    main()

"""Time cost of the kernel-size ablation's variants (docs/method.md §6): ms per training step, ms per forward at each
evaluation length, analytic FLOPs per token, and ratios against Kerple measured in the same run.

    python tests/benchmarks/bench_time_cost.py [--preset small] [--steps 40] [--threads 1]

The trainer's own ms_per_step (median after warm-up steps) and the evaluation's forward timing are what a
trial reports; this script runs them side by side, one variant after another, on the same windows.
"""

from __future__ import annotations

import argparse

import torch

from dape_core import build_model
from dape_core.config import ModelConfig
from dape_core.data import DataConfig, TrainStream, evaluation_windows, load_corpus
from dape_core.evaluate import forward_flops_per_token, forward_ms_by_length
from dape_core.train import TrainConfig, train

VARIANTS = {
    "Kerple": {"pos_encoding": "kerple", "processor": "none"},
    "DAPE-Kerple": {"pos_encoding": "kerple", "processor": "dapev2", "kernel_size": 1},
    "DAPE1x3-Kerple": {"pos_encoding": "kerple", "processor": "dapev2", "kernel_size": 3},
    "RoPE": {"pos_encoding": "rope", "processor": "none"},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--lengths", default="64,128,256,512")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lengths = [int(x) for x in args.lengths.split(",")]
    corpus = load_corpus(DataConfig())
    windows = evaluation_windows(corpus.validation, lengths, n_windows=8, seed=0)
    cfg = TrainConfig(steps=args.steps, batch_size=args.batch_size, seq_len=args.seq_len)
    rows = {}
    for label, overrides in VARIANTS.items():
        torch.manual_seed(0)
        model = build_model(ModelConfig(preset=args.preset, d_dape=32, **overrides))
        trained = train(model, TrainStream(corpus.stream_regions(), seed=0), cfg)
        forward = forward_ms_by_length(model, windows, batch_size=8, warmup=1, reps=5)
        rows[label] = (trained.ms_per_step, forward, forward_flops_per_token(model, args.seq_len))
    base_step, base_forward, base_flops = rows["Kerple"]
    header = " | ".join(f"fwd L={L} ms (x)" for L in lengths)
    print(f"preset {args.preset}, batch {args.batch_size} x {args.seq_len}, {args.steps} steps, "
          f"{args.threads} thread(s); forward batch 8")
    print(f"| variant | ms/step (x Kerple) | {header} | GFLOPs/token fwd (x) |")
    print("|" + "---|" * (3 + len(lengths)))
    for label, (step, forward, flops) in rows.items():
        cells = " | ".join(f"{forward[L]:.1f} ({forward[L] / base_forward[L]:.2f})" for L in lengths)
        flops_cell = f"{flops / 1e9:.5f} ({flops / base_flops:.2f})"
        print(f"| {label} | {step:.1f} ({step / base_step:.2f}) | {cells} | {flops_cell} |")


if __name__ == "__main__":
    main()

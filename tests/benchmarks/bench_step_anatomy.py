"""Where the main job's training time goes against its compute limit: each variant's training step on one thread
(as in a Ray trial), its rate in GFLOP/s against the matmul rate measured in the same run, its matrix products
against the rest, and what the main job's training would take on 2 perfectly packed slots at those rates.

    python tests/benchmarks/bench_step_anatomy.py [--steps 30] [--variants Kerple DAPE-Kerple ...]

The variants are studies/kernel_size.yaml's trials at their CPU default (preset small, Kerple, D = 32, batch 16,
length 64, 500 steps). Each is measured in a fresh process with the allocator setting a Ray trial has
(`dape_core.allocator.keep_freed_memory`): the median thread CPU time of the last half of `--steps` training
steps (AdamW), then a profile of 5 more steps (torch.profiler), whose self CPU time in matrix products
(aten::mm, bmm, addmm, baddbmm) is split from the rest (elementwise passes, copies, reductions, dispatch).

The compute limit is issue 45's: the study's training FLOPs (dape_core's per-token count) over 2 cores at one
thread's matmul rate on the model's shape ((1024x128)@(128x384), measured before and after the variants). Three
floors of the training alone, each over the limit, none counting the evaluation, start-up or packing:

- measured: every trial at its measured ms/step (one process alone; two trials at once are a few percent slower);
- FLOP parity: every trial at the baseline's (Kerple's, no processor) GFLOP/s, i.e. the score processor costing
  exactly its FLOP share of a step, the ideal of issue 45's item 3;
- the limit itself, 1.00 by definition: every FLOP at the large-matmul rate.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
STUDY = HERE.parents[1] / "studies" / "kernel_size.yaml"
GEMMS = {"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm"}


def child(label: str, steps: int) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from dape_core import ExperimentConfig
    from dape_core.allocator import keep_freed_memory
    from dape_core.evaluate.flops import forward_flops_per_token
    from dape_core.model import build_model
    from orchestrator.study.load import load_study
    from orchestrator.trial.trials import expand

    torch.set_num_threads(1)
    keep_freed_memory()
    trial = next(trial for trial in expand(load_study(STUDY)) if trial.label == label)
    cfg = ExperimentConfig(**trial.config)
    torch.manual_seed(0)
    model = build_model(cfg.model).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
    batch, length = cfg.train.batch_size, cfg.train.seq_len
    tokens = torch.randint(0, cfg.model.vocab_size, (batch, length + 1), generator=torch.Generator().manual_seed(1))

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        _, loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        optimizer.step()

    times = []
    for _ in range(steps):
        started = time.thread_time()
        step()
        times.append(time.thread_time() - started)
    with profile(activities=[ProfilerActivity.CPU]) as profiled:
        for _ in range(5):
            step()
    events = profiled.key_averages()
    total = sum(event.self_cpu_time_total for event in events)
    gemm = sum(event.self_cpu_time_total for event in events if event.key in GEMMS)
    flops = 3 * forward_flops_per_token(model, length) * batch * length
    print(json.dumps({"ms": 1e3 * statistics.median(times[len(times) // 2 :]), "gflop": flops / 1e9,
                      "gemm_share": gemm / total, "steps": cfg.train.steps}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--variants", nargs="+",
                        default=["Kerple", "DAPE-Kerple", "DAPE1x3-Kerple", "DAPE1x5-Kerple", "DAPE1x7-Kerple"])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps)
        return
    sys.path.insert(0, str(HERE))
    from bench_main_job import matmul_gflops

    before = matmul_gflops()
    rows = {}
    for label in args.variants:
        out = subprocess.run([sys.executable, __file__, "--steps", str(args.steps), "--child", label],
                             check=True, capture_output=True, text=True).stdout
        rows[label] = json.loads(out.strip().splitlines()[-1])
    after = matmul_gflops()
    rate = (before + after) / 2
    print(f"one thread per variant, batch 16, length 64; ms/step: median thread CPU time of the last "
          f"{args.steps - args.steps // 2} of {args.steps} steps")
    print(f"matmul, one thread, (1024x128)@(128x384): {before:.0f} GFLOP/s before, {after:.0f} after")
    print(f"{'variant':16}{'ms/step':>9}{'GFLOP/step':>11}{'GFLOP/s':>9}{'of matmul':>10}{'in GEMMs':>9}")
    for label, row in rows.items():
        achieved = row["gflop"] / row["ms"] * 1e3
        print(f"{label:16}{row['ms']:9.1f}{row['gflop']:11.2f}{achieved:9.1f}{achieved / rate:10.2f}"
              f"{row['gemm_share']:9.0%}")
    baseline = next(iter(rows.values()))
    parity = baseline["gflop"] / baseline["ms"] * 1e3  # GFLOP/s of the first variant (the baseline)
    flops = sum(row["gflop"] * row["steps"] for row in rows.values())
    limit = flops / (2 * rate)
    measured = sum(row["ms"] * row["steps"] for row in rows.values()) / 1e3 / 2
    at_parity = flops / parity / 2
    print(f"the training of these {len(rows)} trials, {flops / 1e3:.2f} TFLOP, on 2 perfectly packed slots:")
    print(f"  compute limit (every FLOP at {rate:.0f} GFLOP/s): {limit:6.1f} s  1.00")
    print(f"  FLOP parity ({next(iter(rows))}'s {parity:.1f} GFLOP/s): {at_parity:6.1f} s  {at_parity / limit:.2f}")
    print(f"  measured ms/step:                  {measured:6.1f} s  {measured / limit:.2f}")
    print("(the main job's wall adds the evaluation, start-up, packing and the end: bench_main_job.py)")


if __name__ == "__main__":
    main()

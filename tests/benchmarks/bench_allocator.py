"""Milliseconds per training step in a fresh process and a warm one, glibc's default allocator against
`dape_core.allocator.keep_freed_memory` (issue 45 item 2), each in its own new process, in the same run.

    python tests/benchmarks/bench_allocator.py [--steps 12] [--variants Kerple DAPE1x3]

Each child process builds the main job's model (studies/kernel_size.yaml's CPU default: preset small, Kerple,
D = 32, batch 16, length 64) on one thread, as a Ray trial does, and trains `--steps` steps (AdamW): the
first step is the fresh process's, the median of the last half the warm one's. Per step: the thread's CPU
time, its minor page faults and its system time (getrusage), and the loss, which must be the same bit for bit
with either setting. The ratios keep / default are the figures on a machine shared with other work.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

VARIANTS = {"Kerple": {"processor": "none"}, "DAPE1x3": {"processor": "dapev2", "kernel_size": 3},
            "DAPE": {"processor": "dapev2", "kernel_size": 1}, "DAPE1x7": {"processor": "dapev2", "kernel_size": 7}}


def child(variant: str, keep: bool, steps: int) -> None:
    import torch

    from dape_core import ModelConfig
    from dape_core.allocator import keep_freed_memory
    from dape_core.model import build_model

    torch.set_num_threads(1)
    if keep:
        keep_freed_memory()
    torch.manual_seed(0)
    cfg = ModelConfig(preset="small", pos_encoding="kerple", d_dape=32, train_length=64, **VARIANTS[variant])
    model = build_model(cfg).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, cfg.vocab_size, (16, 65), generator=torch.Generator().manual_seed(1))
    rows = []
    for _ in range(steps):
        before, started = resource.getrusage(resource.RUSAGE_SELF), time.thread_time()
        optimizer.zero_grad(set_to_none=True)
        _, loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        optimizer.step()
        after = resource.getrusage(resource.RUSAGE_SELF)
        rows.append({"ms": 1e3 * (time.thread_time() - started), "faults": after.ru_minflt - before.ru_minflt,
                     "sys_ms": 1e3 * (after.ru_stime - before.ru_stime), "loss": loss.item().hex()})
    print(json.dumps(rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--variants", nargs="+", default=["Kerple", "DAPE1x3"], choices=sorted(VARIANTS))
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1] == "keep", args.steps)
        return
    print(f"one thread, {args.steps} steps per process; warm = median of the last {args.steps // 2}")
    print(f"{'variant':9}{'allocator':10}{'fresh ms':>9}{'warm ms':>9}{'faults/step':>12}{'sys ms/step':>12}")
    for variant in args.variants:
        runs = {}
        for setting in ("default", "keep"):
            out = subprocess.run([sys.executable, __file__, "--steps", str(args.steps), "--child", variant, setting],
                                 check=True, capture_output=True, text=True).stdout
            rows = json.loads(out.strip().splitlines()[-1])
            warm = rows[len(rows) - len(rows) // 2 :]
            runs[setting] = rows
            print(f"{variant:9}{setting:10}{rows[0]['ms']:9.1f}{statistics.median(r['ms'] for r in warm):9.1f}"
                  f"{statistics.median(r['faults'] for r in warm):12.0f}"
                  f"{statistics.median(r['sys_ms'] for r in warm):12.1f}")
        same = [r["loss"] for r in runs["default"]] == [r["loss"] for r in runs["keep"]]
        half = args.steps // 2
        ratio = (statistics.median(r["ms"] for r in runs["keep"][-half:])
                 / statistics.median(r["ms"] for r in runs["default"][-half:]))
        print(f"{variant}: warm keep / default {ratio:.2f}; losses bit-identical: {same}")


if __name__ == "__main__":
    main()

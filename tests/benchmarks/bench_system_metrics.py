"""What sampling the hardware costs a trial (orchestrator/execution/system_metrics.py), against the same trial
without sampling, in the same run.

    python tests/benchmarks/bench_system_metrics.py [--study studies/kernel_size.yaml] [--repeats 2] \
        [--interval 10] [key=value ...]

One trial of the study at its CPU default (the first row, seed 0; overrides such as `base.train.steps=200`
shorten it) runs in this process 2 x --repeats times, alternating: through `trainable.run_trial` alone (the
reference: no sampler; after a warm-up of two steps) and through `trainable.execute` (as every trial runs: the
sampler thread at the default interval, its samples on the results). Printed: each run's wall time, the median
ratio sampled / reference (a machine shared with others moves each run by more than the sampler can: read it with
the spread), and the sampler's own cost, measured directly: the time spent inside its samples, and that as a share
of the sampled trials' wall time (the bound the issue sets: at most 1%).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", default=str(ROOT / "studies" / "kernel_size.yaml"))
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--interval", type=float, default=None, help="sampling interval (default: the trial's own)")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()

    from orchestrator.execution import system_metrics, trainable
    from orchestrator.study.load import load_study
    from orchestrator.study.overrides import parse_override
    from orchestrator.trial.trials import expand

    study = load_study(Path(args.study), overrides=dict(parse_override(text) for text in args.overrides))
    trial = expand(study)[0]
    threads = max(1, int(study.resources.cpus))
    interval = args.interval or system_metrics.INTERVAL_S
    spent: list[float] = []  # seconds inside each sample of the sampled runs
    timed_sample = system_metrics.SystemSampler.sample

    def sample(self):
        started = time.perf_counter()
        try:
            return timed_sample(self)
        finally:
            spent.append(time.perf_counter() - started)

    system_metrics.SystemSampler.sample = sample
    if args.interval:
        real_init = system_metrics.SystemSampler.__init__
        system_metrics.SystemSampler.__init__ = lambda self, interval=0, gpus=True: real_init(self, args.interval, gpus)
    print(f"trial {trial.run_name} of {study.name} ({trial.config['train']['steps']} steps, {threads} thread(s)); "
          f"sampling every {interval:g}s")
    # A warm-up of a few steps first (imports, the corpus, allocator): neither timed run pays for them.
    warm = trial.payload()
    warm["config"] = {**warm["config"], "train": {**warm["config"]["train"], "steps": 2}}
    with tempfile.TemporaryDirectory(prefix="bench_sysmetrics_") as folder:
        trainable.run_trial({"trial": warm, "checkpoint_root": str(Path(folder) / "checkpoints"),
                             "launch_dir": str(ROOT), "keep_weights": "none"}, lambda result: None, threads)
    times: dict[str, list[float]] = {"reference": [], "sampled": []}
    samples_per_run: list[int] = []
    for repeat in range(args.repeats):
        for kind in ("reference", "sampled"):
            with tempfile.TemporaryDirectory(prefix="bench_sysmetrics_") as folder:
                config = {"trial": trial.payload(), "checkpoint_root": str(Path(folder) / "checkpoints"),
                          "launch_dir": str(ROOT), "keep_weights": "none"}
                results: list[dict] = []
                before = len(spent)
                started = time.perf_counter()
                (trainable.execute if kind == "sampled" else trainable.run_trial)(config, results.append, threads)
                seconds = time.perf_counter() - started
            times[kind].append(seconds)
            if kind == "sampled":
                samples_per_run.append(len(spent) - before)
            print(f"  repeat {repeat + 1} {kind:9s} {seconds:8.2f}s" +
                  (f"  ({len(spent) - before} samples)" if kind == "sampled" else ""), flush=True)
    ratios = [s / r for s, r in zip(times["sampled"], times["reference"])]
    print(f"wall time sampled / reference: median {statistics.median(ratios):.4f} "
          f"(each repeat: {', '.join(f'{ratio:.4f}' for ratio in ratios)})")
    inside = sum(spent)
    share = inside / sum(times["sampled"])
    print(f"the sampler's own time: {inside * 1000:.1f} ms in {len(spent)} samples "
          f"({inside / max(1, len(spent)) * 1000:.2f} ms each) = {share * 100:.4f}% of the sampled trials' wall time "
          f"({'within' if share <= 0.01 else 'OVER'} the 1% bound)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

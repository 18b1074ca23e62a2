"""What keeping a trial's weights costs: the time it adds to a trial at the CPU default, against that trial's own
wall time in the same run, and the size per trial at the default and at the paper's model sizes.

    python tests/benchmarks/bench_weights.py [--steps 500] [--variant DAPE1x3-Kerple]

One trial of `studies/kernel_size.yaml` (the CPU default: 0.86M parameters, 500 steps) is run with
`run_experiment(weights_dir=...)` on one thread, as a trial runs; then its stored folder is logged to a fresh
SQLite MLflow store as the recorder logs it (three `log_artifact` calls) and removed. Keeping adds the save
(measured inside the trial: `weights_seconds`) and the logging; the ratio is their sum over the trial's wall
time. Sizes: float32 weights (4 bytes per parameter, dape_core's analytic count; the safetensors header is a
few KB), at each preset of the paper profiles (vocabulary 50304).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--variant", default="DAPE1x3-Kerple")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import torch
    from mlflow.tracking import MlflowClient

    from dape_core import ExperimentConfig, ModelConfig, run_experiment
    from dape_core.stored import weights_bytes
    from orchestrator import expand, load_study

    trial = next(t for t in expand(load_study(ROOT / "studies" / "kernel_size.yaml")) if t.label == args.variant)
    cfg = ExperimentConfig(**{**trial.config, "train": {**trial.config["train"], "steps": args.steps}})
    with tempfile.TemporaryDirectory(prefix="bench_weights_") as folder:
        folder = Path(folder)
        started = time.perf_counter()
        result = run_experiment(cfg, threads=1, weights_dir=folder / "model")
        trial_s = time.perf_counter() - started
        client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
        experiment = client.create_experiment("bench", artifact_location=(folder / "artifacts").as_uri())
        run_id = client.create_run(experiment).info.run_id
        started = time.perf_counter()
        for path in map(Path, result.weights):
            client.log_artifact(run_id, str(path), "model")
            path.unlink()
        log_s = time.perf_counter() - started
        size = sum((folder / "artifacts" / run_id / "artifacts" / "model" / Path(p).name).stat().st_size
                   for p in result.weights)
    added = result.weights_seconds + log_s
    print(f"One trial of kernel_size ({args.variant}, {args.steps} steps, 1 thread, torch {torch.__version__}, "
          f"{os.cpu_count()} CPUs, shared machine):")
    print("| trial wall s | save s (in trial) | log to MLflow s | added | files (MiB) |")
    print("|---:|---:|---:|---:|---:|")
    print(f"| {trial_s:.1f} | {result.weights_seconds:.3f} | {log_s:.3f} | {added / trial_s:.2%} "
          f"| {size / 2**20:.2f} |")
    print()
    print("Size of the kept weights per trial (float32):")
    print("| model | parameters | weights |")
    print("|---|---:|---:|")
    presets = [("CPU default (small)", cfg.model)] + [
        (name, ModelConfig(preset=name, vocab_size=50304, pos_encoding="kerple", processor="dapev2", kernel_size=3))
        for name in ("125M", "350M", "2.7B")]
    for name, model in presets:
        count = model.num_parameters()
        size = weights_bytes(count)
        shown = f"{size / 2**30:.2f} GiB" if size >= 2**30 else f"{size / 2**20:.1f} MiB"
        print(f"| {name} | {count / 1e6:.2f}M | {shown} |")


if __name__ == "__main__":
    main()

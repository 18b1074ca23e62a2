"""What `orchestrator evaluate --visualise` costs against the evaluation it accompanies, on kernel_size's model.

    python tests/benchmarks/bench_visualise.py                      # this code
    python tests/benchmarks/bench_visualise.py --reference DIR      # also the code checked out in DIR (before)
    python tests/benchmarks/bench_visualise.py --lengths 64 128 256 512 1024 --kernel 3

One trial of studies/kernel_size.yaml (its `small` model, Kerple + DAPE V2 with a 1xk kernel, the stdlib
corpus), freshly initialised: the cost of evaluating and of drawing depends on the shapes, not on the weights,
so no training is needed. In a fresh subprocess per code (PYTHONPATH=<code>, one torch thread, as a trial
gets with resources.cpus: 1), it times
- the evaluation: `evaluate_stored` scoring every length (what `evaluate --lengths` and a trial's evaluation do);
- visualise: what `--visualise` adds. This code: `dape_core.experiment.visualise` alone (the worker draws the
  maps without scoring). A reference without it: `evaluate_stored` with eval.visualise on (its worker scored
  every length again and drew the one-row heat maps).
Each code prints both times and visualise / evaluation (the issue's bar: at most 1); with --reference the
before/after ratio of the visualise time is printed too (same machine, same run).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]


def measure(lengths: list[int], kernel: int) -> dict:
    """In this process (its PYTHONPATH's code): the two times, seconds."""
    import dataclasses

    import torch

    from dape_core import ExperimentConfig, experiment
    from dape_core.data import load_corpus
    from dape_core.model import build_model

    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = ExperimentConfig(model={"preset": "small", "pos_encoding": "kerple", "d_dape": 32, "processor": "dapev2",
                                  "kernel_size": kernel},
                           data={"source": "stdlib"}, train={"steps": 500, "batch_size": 16, "seq_len": 64},
                           eval={"lengths": lengths, "tail_tokens": 32, "n_windows": 64})
    corpus = load_corpus(cfg.data)
    model = build_model(cfg.model).eval()
    quiet = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, timing=False, visualise=False))
    started = time.perf_counter()
    experiment.evaluate_stored(model, quiet, None, corpus)
    evaluation = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        if hasattr(experiment, "visualise"):
            files = experiment.visualise(model, cfg, corpus, folder)
            how = "maps alone (query x key per head and layer)"
        else:
            drawn = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, timing=False, visualise=True))
            files = experiment.evaluate_stored(model, drawn, folder, corpus)["artifacts"]
            how = "every length scored again + one-row heat maps"
        seconds = time.perf_counter() - started
    return {"evaluation_s": evaluation, "visualise_s": seconds, "how": how, "files": len(files)}


def _run(code: Path, lengths: list[int], kernel: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1"}
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([sys.executable, str(HERE), "--measure", out.name, "--lengths", *map(str, lengths),
                        "--kernel", str(kernel)], env=env, check=True, cwd=code)
        return json.loads(Path(out.name).read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[64, 128, 256, 512, 1024])
    parser.add_argument("--kernel", type=int, default=3)
    parser.add_argument("--reference", type=Path, help="another checkout of the code (e.g. before a change)")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        Path(args.measure).write_text(json.dumps(measure(args.lengths, args.kernel)))
        return
    codes = {"this code": ROOT} | ({"reference": args.reference.resolve()} if args.reference else {})
    results = {name: _run(code, args.lengths, args.kernel) for name, code in codes.items()}
    print(f"kernel_size's small model, Kerple + DAPE V2 1x{args.kernel}, lengths {args.lengths}, one torch thread")
    for name, result in results.items():
        print(f"{name:>10}: evaluation {result['evaluation_s']:7.2f} s; --visualise {result['visualise_s']:7.2f} s "
              f"({result['how']}, {result['files']} files); visualise / evaluation = "
              f"{result['visualise_s'] / result['evaluation_s']:.2f}")
    if args.reference:
        ratio = results["this code"]["visualise_s"] / results["reference"]["visualise_s"]
        print(f"--visualise, this code / reference: {ratio:.2f}")


if __name__ == "__main__":
    main()

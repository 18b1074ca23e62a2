"""The report.lengths evaluation of one kernel_size trial (what `orchestrator run`'s evaluation task computes),
this tree against a reference tree, in one run, one thread each, alternating, so the ratio holds on a busy machine.

    python tests/benchmarks/bench_eval_tail.py --reference /work/main [--study studies/kernel_size.yaml]
                                               [--variant DAPE1x3-Kerple] [--repeats 3]

Each side runs `dape_core.experiment.evaluate_stored` at the study's report.lengths (1024 for kernel_size, with the
training length for ΔP) in a subprocess whose PYTHONPATH is its tree, on the same seeded model (the weights do
not change the cost; the perplexities of both sides are printed and must agree: the tail-only last layer of
`CausalLM.forward(tail=)` changes no number). Prints the best time of each side over --repeats and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def worker(study_path: str, variant: str) -> None:
    import dataclasses
    import time

    import torch

    from dape_core import ExperimentConfig, build_model
    from dape_core.data import load_corpus
    from dape_core.experiment import evaluate_stored
    from orchestrator.study import load_study
    from orchestrator.trial.trials import expand

    torch.set_num_threads(1)
    study = load_study(Path(study_path))
    trial = next(t for t in expand(study) if t.label == variant)
    cfg = ExperimentConfig(**trial.config)
    later = study.report.later_lengths(cfg.train.seq_len, cfg.eval.lengths)
    corpus = load_corpus(cfg.data)
    torch.manual_seed(0)
    model = build_model(cfg.model).eval()
    quiet = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, timing=False))
    started = time.perf_counter()
    result = evaluate_stored(model, quiet, corpus=corpus, lengths=later)
    seconds = time.perf_counter() - started
    print(json.dumps({"seconds": seconds, "perplexity": {str(k): v for k, v in result["perplexity"].items()}}))


def run_side(tree: Path, study: str, variant: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", "--study", study,
                          "--variant", variant], cwd=tree, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", required=False, default=None)
    parser.add_argument("--study", default=str(ROOT / "studies" / "kernel_size.yaml"))
    parser.add_argument("--variant", default="DAPE1x3-Kerple")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", action="store_true")
    args = parser.parse_args()
    if args.worker:
        worker(args.study, args.variant)
        return
    if args.reference is None:
        parser.error("--reference: the tree to compare against (e.g. /work/main)")
    study = str(Path(args.study).resolve())
    sides = {"this": ROOT, "reference": Path(args.reference).resolve()}
    best, values = {}, {}
    for _ in range(args.repeats):
        for name, tree in sides.items():
            result = run_side(tree, study, args.variant)
            best[name] = min(best.get(name, float("inf")), result["seconds"])
            values[name] = result["perplexity"]
    print(f"{Path(study).stem} / {args.variant}, report.lengths evaluation, one thread, best of {args.repeats}: "
          f"this {best['this']:.2f} s, reference {best['reference']:.2f} s")
    for length in values["this"]:
        a, b = values["this"][length], values["reference"].get(length)
        print(f"  ppl_{length}: this {a!r}, reference {b!r}, relative difference {abs(a - b) / b:.2e}")
    print(f"ratio (this / reference): {best['this'] / best['reference']:.3f}")


if __name__ == "__main__":
    main()

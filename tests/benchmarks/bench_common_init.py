"""What common initial weights buy the kernel_size study's paired tests: each claim's paired SD, and the seeds
a one-sided paired test would need, with every variant starting from its own random network at a seed (as
before dape_core/random_streams.py) and with the variants sharing one network at a seed (as now).

    python tests/benchmarks/bench_common_init.py [--seeds 6] [--steps 500] [--rows Kerple DAPE1x3-Kerple ...]
                                                 [--jobs 2] [--results FILE]

Each (arm, row, seed) trains studies/kernel_size.yaml's trial at its CPU default (or `--steps`) in a fresh process
on one thread (`dape_core.run_experiment`, no Ray, no MLflow) and scores its lengths and 16x. Both arms train on
the seed's data order and are scored on the same windows; they differ only in the initial network:

- independent: the network of a row at seed s is built at a seed keyed by s and the row's label, so two rows
  at one seed start from two unrelated networks (what a component's draws from the global generator did);
- common: the product as it is (`build_model(cfg, seed=s)`), every shared parameter identical across rows.

For each of the study's claims (orchestrator.study.claim_checks: the same checks `--decide` judges), per check:
the mean and SD over seeds of the paired difference d = A − scale·B − shift (a length ratio A/A_over where the
claim has `over`), and the seeds n a one-sided paired t-test at 0.05 needs for 0.9 power at that mean and SD
(the smallest n with |mean|·√n/SD ≥ t(0.95, n−1) + z(0.9)). A claim needs the seeds of its hardest check. The
SD ratio (common / independent) has its 95% interval from the F distribution (Pitman-Morgan for paired arms
would need the pairing across arms, which the arms share by seed; the F interval is the conservative one).
`--results` keeps every trial's perplexities in a JSON file and reuses what is there.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
STUDY = ROOT / "studies" / "kernel_size.yaml"
ARMS = ("independent", "common")


def child(arm: str, label: str, seed: int, steps: int) -> None:
    """Train one trial and print its metrics as one JSON line."""
    import dape_core.model as model_module
    from dape_core import ExperimentConfig, run_experiment
    from dape_core.random_streams import stream_seed
    from orchestrator.study.load import load_study
    from orchestrator.trial.trials import expand

    study = load_study(STUDY)
    trial = next(trial for trial in expand(study) if trial.label == label)
    config = dict(trial.config)
    config["train"] = {**config["train"], "seed": seed, "steps": steps}
    cfg = ExperimentConfig(**config)
    if arm == "independent":  # the row's own network at this seed; data order and windows stay the seed's
        plain = model_module.build_model
        model_module.build_model = lambda model_cfg, seed=None: plain(model_cfg, seed=stream_seed(seed, label))
    later = study.report.later_lengths(cfg.train.seq_len, list(cfg.eval.lengths))
    result = run_experiment(cfg, threads=1, later_lengths=later)
    assert result is not None
    print(json.dumps(result.metrics()))


def train_all(rows: list[str], seeds: int, steps: int, jobs: int, results: Path | None) -> dict:
    done: dict = json.loads(results.read_text()) if results and results.exists() else {}
    todo = [(arm, label, seed) for arm in ARMS for seed in range(seeds) for label in rows
            if f"{arm}/{label}/{seed}/{steps}" not in done]

    def one(job: tuple[str, str, int]) -> None:
        arm, label, seed = job
        out = subprocess.run([sys.executable, __file__, "--child", arm, label, str(seed), str(steps)],
                             capture_output=True, text=True, check=True, cwd=ROOT)
        done[f"{arm}/{label}/{seed}/{steps}"] = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"  trained {arm:11s} {label:15s} seed {seed}", flush=True)
        if results:
            results.write_text(json.dumps(done, indent=1, sort_keys=True))

    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, todo))
    return done


def seeds_needed(mean: float, sd: float, *, alpha: float = 0.05, power_z: float = 1.2816) -> float:
    """The smallest n for 0.9 power of a one-sided paired t-test at `alpha`; inf where the mean is 0."""
    from scipy import stats

    if sd == 0:
        return 2
    if mean == 0:
        return math.inf
    for n in range(2, 10_000):
        if abs(mean) * math.sqrt(n) / sd >= stats.t.ppf(1 - alpha, n - 1) + power_z:
            return n
    return math.inf


def value(metrics: dict, term) -> float:
    a = metrics[term.column]
    return a / metrics[term.over] if term.over else a


def differences(done: dict, arm: str, check, seeds: int, steps: int) -> list[float]:
    out = []
    for seed in range(seeds):
        left = value(done[f"{arm}/{check.left.label}/{seed}/{steps}"], check.left)
        right = (check.scale * value(done[f"{arm}/{check.right.label}/{seed}/{steps}"], check.right)
                 if check.right is not None else 0.0) + check.shift
        out.append(left - right)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--rows", nargs="*", default=None, help="the study's rows (default: all five)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--results", type=Path, default=None)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        arm, label, seed, steps = args.child
        child(arm, label, int(seed), int(steps))
        return
    from scipy import stats

    from orchestrator.study.claim_checks import claim_checks
    from orchestrator.study.load import load_study

    study = load_study(STUDY)
    rows = args.rows or [variant.label for variant in study.variants]
    print(f"kernel_size rows {rows}, seeds 0-{args.seeds - 1}, {args.steps} steps, {args.jobs} at a time")
    done = train_all(rows, args.seeds, args.steps, args.jobs, args.results)
    print("\n| claim | check | mean (common) | SD independent | SD common | ratio (95% CI) | seeds independent "
          "| seeds common |\n|:--|:--|--:|--:|--:|:--|--:|--:|")
    dof = args.seeds - 1
    low_q, high_q = stats.f.ppf(0.025, dof, dof), stats.f.ppf(0.975, dof, dof)
    for claim in study.expect:
        checks = [check for check in claim_checks(study, claim)
                  if check.left.label in rows and (check.right is None or check.right.label in rows)]
        if not checks:
            print(f"| {claim.id} | (its rows are not among --rows) | | | | | | |")
            continue
        need = {arm: 0.0 for arm in ARMS}
        for check in checks:
            sds, means = {}, {}
            for arm in ARMS:
                diffs = differences(done, arm, check, args.seeds, args.steps)
                means[arm], sds[arm] = statistics.fmean(diffs), statistics.stdev(diffs)
                need[arm] = max(need[arm], seeds_needed(means[arm], sds[arm]))
            ratio = sds["common"] / sds["independent"] if sds["independent"] else math.nan
            interval = f"{ratio / math.sqrt(high_q):.2f}-{ratio / math.sqrt(low_q):.2f}"
            right = check.right.label if check.right else ""
            name = f"{check.left.describe()} {check.relation} {check.scale:g}x{right}"
            needed = {arm: seeds_needed(means[arm], sds[arm]) for arm in ARMS}
            print(f"| {claim.id} | {name} | {means['common']:+.4f} | {sds['independent']:.4f} | "
                  f"{sds['common']:.4f} | {ratio:.2f} ({interval}) | {needed['independent']} | {needed['common']} |")
        print(f"| **{claim.id}** | hardest check | | | | | **{need['independent']}** | **{need['common']}** |")


if __name__ == "__main__":
    main()

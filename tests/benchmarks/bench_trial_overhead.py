"""What a trial costs beyond its training, with Tune reusing a finished trial's process (the orchestrator's
setting) against a fresh process per trial (the reference), in the same run.

    python tests/benchmarks/bench_trial_overhead.py [--trials 6] [--steps 60]

A tiny study of N identical trials (seeds 0..N-1), one at a time (`max_concurrent: 1`), runs twice through
`run_study` on one local Ray, each time into a new SQLite store: once as the orchestrator runs it, once with
`reuse_actors=False` patched into Tune's config (the reference; nothing else differs). For each: the study's
wall time, and each trial run's wall time in MLflow (start to end of the run: process start, imports, corpus,
training, evaluation). The first trial starts a process in both; the others reuse it in the first. The
perplexities of the two runs are compared too: a reused process must give the same numbers.
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
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def _study(trials: int, steps: int) -> dict:
    return {
        "name": "overhead",
        "base": {"model": {"preset": "tiny", "pos_encoding": "alibi", "processor": "none"},
                 "data": {"max_files": 300},
                 "train": {"steps": steps, "batch_size": 8, "seq_len": 32, "log_every": 10},
                 "eval": {"lengths": [32, 64], "tail_tokens": 16, "n_windows": 4}},
        "seeds": list(range(trials)),
        "resources": {"cpus": 1, "max_concurrent": 1, "max_retries": 0},
    }


def _run(spec: dict, root: Path, reuse: bool) -> tuple[float, list[tuple[int, float, float]]]:
    """(study wall seconds, [(seed, trial run seconds, ppl_64)] in start order)."""
    from mlflow.tracking import MlflowClient
    from ray import tune

    from orchestrator import parse_study
    from orchestrator.execution import ray_tune
    from orchestrator.run import run_and_report
    from orchestrator.run_context import RunContext

    real = tune.TuneConfig

    class Reference(real):  # the reference only: one process per trial
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "reuse_actors": False})

    ray_tune.tune.TuneConfig = real if reuse else Reference
    try:
        uri = f"sqlite:///{root / 'mlflow.db'}"
        started = time.perf_counter()
        context = RunContext.create(parse_study(spec), uri, storage_dir=root / "state")
        outcome = run_and_report(context, root / "reports")
        wall = time.perf_counter() - started
    finally:
        ray_tune.tune.TuneConfig = real
    assert outcome.ok, outcome.failed
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(spec["name"])
    runs = client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'trial'")
    rows = sorted((run.info.start_time, int(run.data.params["train.seed"]),
                   (run.info.end_time - run.info.start_time) / 1e3, run.data.metrics["ppl_64"]) for run in runs)
    return wall, [row[1:] for row in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parents[2]))
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    spec = _study(args.trials, args.steps)
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for reuse in (True, False):
            results[reuse] = _run(spec, Path(folder) / ("reuse" if reuse else "fresh"), reuse)
    ray.shutdown()
    print(f"{args.trials} trials of {args.steps} steps, one at a time; load average {os.getloadavg()[0]:.1f}")
    print(f"{'':28} {'study wall':>10} {'1st trial':>9} {'others (median)':>15}")
    for reuse, label in ((True, "reused process (orchestrator)"), (False, "fresh process (reference)")):
        wall, rows = results[reuse]
        seconds = [row[1] for row in rows]
        print(f"{label:28} {wall:9.1f}s {seconds[0]:8.1f}s {statistics.median(seconds[1:]):14.1f}s")
    (wall_r, rows_r), (wall_f, rows_f) = results[True], results[False]
    ratio = statistics.median(r[1] for r in rows_r[1:]) / statistics.median(r[1] for r in rows_f[1:])
    print(f"ratio reused / fresh: study wall {wall_r / wall_f:.2f}, later trials {ratio:.2f}")
    same = {seed: ppl for seed, _, ppl in rows_r} == {seed: ppl for seed, _, ppl in rows_f}
    print(f"perplexities of the two runs identical: {same}")


if __name__ == "__main__":
    main()

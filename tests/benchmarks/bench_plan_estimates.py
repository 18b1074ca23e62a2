"""How good are `orchestrator plan`'s duration estimates, and how busy were the trial slots? From a store.

For every finished trial run of every experiment in the store: its measured training time (train_seconds)
against the plan's two estimates, the analytic one (FLOPs over an assumed throughput) and the learned one
(the median ms_per_step of the OTHER finished runs of the same shape x its steps: the run itself is left
out, so a trial never predicts itself). Prints the median absolute error of each, in seconds and relative,
per study and overall, and per study the packing of its trials: the sum of the trials' own time, that sum
over the slots (the lower bound of the wall time), and the span from the first trial's start to the last
one's end, and the makespan of those measured trial times on the slots in three orders, simulated: the study
file's order (how trials went to Tune before), longest-first by the analytic estimate, and longest-first by
the plan's estimate (learned where the store has the shape, else analytic: how they go to Tune now).

    MLFLOW_TRACKING_URI=sqlite:////path/mlflow.db python tests/benchmarks/bench_plan_estimates.py [--slots 2]
"""

from __future__ import annotations

import argparse
import ast
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mlflow.tracking import MlflowClient  # noqa: E402

from dape_core import ExperimentConfig  # noqa: E402
from orchestrator.planning.estimate import estimate  # noqa: E402
from orchestrator.planning.learned import load_measured, shape_key  # noqa: E402
from orchestrator.study import set_dotted  # noqa: E402
from orchestrator.tracking.store import ROLE_TAG  # noqa: E402


def _value(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def config_of(params: dict[str, str]) -> ExperimentConfig:
    nested: dict = {}
    for key, text in params.items():
        set_dotted(nested, key, _value(text))
    nested.setdefault("che", None)
    return ExperimentConfig(**nested)


def _mae(pairs: list[tuple[float, float]]) -> str:
    if not pairs:
        return "–"
    absolute = statistics.median(abs(est - real) for est, real in pairs)
    relative = statistics.median(abs(est - real) / real for est, real in pairs)
    return f"{absolute:7.1f} s  ({relative:5.1%})"


def makespan(durations: list[float], slots: int) -> float:
    """List scheduling: each trial, in the given order, starts on the first slot to come free."""
    free = [0.0] * slots
    for duration in durations:
        free.sort()
        free[0] += duration
    return max(free)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tracking-uri", default=os.environ.get("MLFLOW_TRACKING_URI"))
    parser.add_argument("--cpus", type=float, default=1.0, help="CPUs per trial the studies ran with")
    parser.add_argument("--slots", type=int, default=2, help="trials that could run at once")
    args = parser.parse_args()
    client = MlflowClient(args.tracking_uri)
    measured = load_measured(args.tracking_uri)
    overall: dict[str, list] = {"analytic": [], "learned": [], "plan": []}
    print(f"store {args.tracking_uri}")
    print(f"{'study':22s} {'n':>3s} {'learned':>7s}  {'analytic MAE':>20s}  {'learned MAE (its n)':>20s}  "
          f"{'plan MAE':>20s}  {'Σ trial s':>9s} {'Σ/slots':>8s} {'span s':>7s} "
          f"{'file order':>10s} {'longest 1st':>11s} {'by plan':>7s}")
    for experiment in sorted(client.search_experiments(), key=lambda e: e.name):
        runs = client.search_runs([experiment.experiment_id],
                                  f"tags.`{ROLE_TAG}` = 'trial' and attributes.status = 'FINISHED'",
                                  max_results=50000)
        rows = {"analytic": [], "learned": [], "plan": []}
        work, starts, ends, jobs = 0.0, [], [], []
        for run in runs:
            real = run.data.metrics.get("train_seconds")
            if not real:
                continue
            work += real + run.data.metrics.get("eval_seconds", 0.0)
            starts.append(run.info.start_time)
            ends.append(run.info.end_time or run.info.start_time)
            cfg = config_of(run.data.params)
            analytic = estimate(cfg, 0, args.cpus).seconds
            order = (int(run.data.tags.get("row_index", 0)), int(run.data.tags.get("seed", 0)))
            rows["analytic"].append((analytic, real))
            found = measured.lookup(shape_key(run.data.params, run.data.tags.get("device", "cpu")), run.info.run_id)
            steps = cfg.che.steps if cfg.che is not None else cfg.train.steps
            learned = found[0] * steps / 1000 if found else None
            if learned is not None:
                rows["learned"].append((learned, real))
            rows["plan"].append((learned if learned is not None else analytic, real))
            jobs.append((order, analytic, learned if learned is not None else analytic,
                         real + run.data.metrics.get("eval_seconds", 0.0)))
        if not rows["analytic"]:
            continue
        for key in overall:
            overall[key] += rows[key]
        span = (max(ends) - min(starts)) / 1000
        in_file_order = makespan([job[-1] for job in sorted(jobs)], args.slots)
        longest = makespan([job[-1] for job in sorted(jobs, key=lambda job: -job[1])], args.slots)
        by_plan = makespan([job[-1] for job in sorted(jobs, key=lambda job: -job[2])], args.slots)
        print(f"{experiment.name:22s} {len(rows['analytic']):3d} {len(rows['learned']):7d}  "
              f"{_mae(rows['analytic']):>20s}  {_mae(rows['learned']):>20s}  {_mae(rows['plan']):>20s}  "
              f"{work:9.0f} {work / args.slots:8.0f} {span:7.0f} "
              f"{in_file_order:10.0f} {longest:11.0f} {by_plan:7.0f}")
    print(f"{'all':22s} {len(overall['analytic']):3d} {len(overall['learned']):7d}  {_mae(overall['analytic']):>20s}  "
          f"{_mae(overall['learned']):>20s}  {_mae(overall['plan']):>20s}")
    print("MAE: median absolute error of the estimated training time against train_seconds (relative in brackets);"
          " learned: leave-one-out over runs of the same shape; plan: learned where it exists, else analytic.")
    print("file order / longest 1st / by plan: the measured trial times (training + evaluation) scheduled on the slots "
          "in the file's order, longest-first by the analytic estimate, and longest-first by the plan's estimate "
          "(as `run` orders them; learned leave-one-out) (simulated makespan, seconds); span: what the run actually "
          "took from first start to last end.")


if __name__ == "__main__":
    main()

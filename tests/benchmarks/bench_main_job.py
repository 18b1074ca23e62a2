"""The main job's wall time against its compute limit on the same machine (issue 45's figure).

    python tests/benchmarks/bench_main_job.py                       # runs the study in a fresh temp folder
    python tests/benchmarks/bench_main_job.py --skip-run --tracking-uri sqlite:///path/mlflow.db   # a finished one

Runs `orchestrator run studies/kernel_size.yaml` (or --study) as a newcomer does, in a new temporary project
folder (a fresh store, data prepared anew), timing the command from start to exit. The compute limit is the
study's training FLOPs (every trial: 3 x forward FLOPs per token from dape_core's own count,
dape_core/evaluate/flops.py, x steps x batch x length) over the cores (os.cpu_count(), the slots a local Ray
gives) at the matmul throughput one thread reaches here on the model's shapes ((1024 x 128) @ (128 x 384),
float32), measured in the same run before and after the study (the faster of the two, each a median of
repetitions). Printed: wall / limit (goal: 2.4), and each trial's perplexities (to compare before and after
a change: they must not move), and the timeline read from the store's run times: start-up to the first trial,
the trials' span with how busy the slots were, and the end. The run gets a cache folder of its own (a newcomer
has no remembered contract pass; matplotlib's font list is the machine's). With --skip-run, the wall is the
finished study's run in the store (its MLflow parent run, start to end), which leaves out the CLI's start-up and
shutdown.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def matmul_gflops(reps: int = 40) -> float:
    """One thread's float32 GFLOP/s on (1024 x 128) @ (128 x 384), the median of `reps` products."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = torch.randn(1024, 128), torch.randn(128, 384)
        for _ in range(5):
            a @ b
        times = []
        for _ in range(reps):
            started = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - started)
        return 2 * 1024 * 128 * 384 / statistics.median(times) / 1e9
    finally:
        torch.set_num_threads(threads)


def training_flops(study_path: Path) -> dict[str, float]:
    """Each trial's training FLOPs (label · seed -> FLOPs), from dape_core's per-token count."""
    from dape_core import ExperimentConfig
    from dape_core.evaluate.flops import forward_flops_per_token
    from dape_core.model import build_model
    from orchestrator.study.load import load_study
    from orchestrator.trial.trials import expand

    flops = {}
    for trial in expand(load_study(study_path)):
        cfg = ExperimentConfig(**trial.config)
        per_token = forward_flops_per_token(build_model(cfg.model), cfg.train.seq_len)
        flops[trial.run_name] = 3 * per_token * cfg.train.steps * cfg.train.batch_size * cfg.train.seq_len
    return flops


def stored_runs(uri: str, study: str) -> tuple[float | None, dict[str, dict[int, float]], dict[str, tuple]]:
    """(the study run's wall seconds, or None; each trial run's perplexity by length, by run name; the runs'
    (start, end) in epoch seconds: the study's under "study", each trial's under its run name)."""
    from mlflow.tracking import MlflowClient

    from orchestrator.tracking import ROLE_TAG

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(study)
    if experiment is None:
        raise SystemExit(f"no study named {study!r} in {uri}")
    runs = client.search_runs([experiment.experiment_id], max_results=10000)
    wall = None
    trials, spans = {}, {}
    for run in runs:
        role = run.data.tags.get(ROLE_TAG)
        span = (run.info.start_time / 1e3, (run.info.end_time or run.info.start_time) / 1e3)
        if role == "study" and run.info.end_time:
            wall = (run.info.end_time - run.info.start_time) / 1e3
            spans["study"] = span
        elif role == "trial":
            spans[run.info.run_name] = span
            trials[run.info.run_name] = {int(key[4:]): value for key, value in run.data.metrics.items()
                                         if key.startswith("ppl_") and key[4:].isdigit()}  # by length
    return wall, trials, spans


def timeline(spans: dict[str, tuple], launched: float | None, exited: float | None) -> list[str]:
    """Where the wall went, from the store's run times: start-up (the command's start, or the study run's, to
    the first trial run's start), the trials' span and how busy the slots were in it (the trial runs' summed
    durations over slots x span: process start, training, evaluation and recording, each in its trial's run),
    and the end (the last trial run's end to the exit, or to the study run's end)."""
    trials = {name: span for name, span in spans.items() if name != "study"}
    if not trials:
        return []
    first = min(start for start, _ in trials.values())
    last = max(end for _, end in trials.values())
    origin = launched if launched is not None else spans.get("study", (first,))[0]
    finish = exited if exited is not None else spans.get("study", (None, last))[1]
    cores = os.cpu_count() or 1
    busy = sum(end - start for start, end in trials.values()) / (cores * (last - first))
    lines = [f"timeline: start-up {first - origin:.1f} s (to the first trial run), trials {last - first:.1f} s "
             f"(slots busy {100 * busy:.0f}%), end {finish - last:.1f} s (the last trial run's end to "
             + ("the exit)" if exited is not None else "the study run's end)")]
    lines += [f"  {name}: {start - origin:6.1f} s to {end - origin:6.1f} s ({end - start:.1f} s)"
              for name, (start, end) in sorted(trials.items(), key=lambda item: item[1])]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", default=str(REPO / "studies" / "kernel_size.yaml"))
    parser.add_argument("--skip-run", action="store_true", help="read a finished study from --tracking-uri")
    parser.add_argument("--tracking-uri", help="with --skip-run: the finished study's store")
    parser.add_argument("--keep", action="store_true", help="keep the temporary project folder")
    args = parser.parse_args()
    study_path = Path(args.study).resolve()
    if args.skip_run and not args.tracking_uri:
        parser.error("--skip-run needs --tracking-uri (the finished study's store)")
    before = matmul_gflops()
    flops = training_flops(study_path)
    import yaml

    name = yaml.safe_load(study_path.read_text())["name"]
    folder = None
    if args.skip_run:
        uri = args.tracking_uri
        wall, trials, spans = stored_runs(uri, name)
        launched = exited = None
        if wall is None:
            raise SystemExit(f"the study {name!r} in {uri} has no finished study run")
        source = "the store's study run"
    else:
        folder = Path(tempfile.mkdtemp(prefix="main_job_"))
        (folder / "studies").mkdir()
        shutil.copy(study_path, folder / "studies" / study_path.name)
        env = {**os.environ, "PYTHONPATH": str(REPO), "MLFLOW_DISABLE_TELEMETRY": "true",
               "RAY_USAGE_STATS_ENABLED": "0"}
        env.pop("MLFLOW_TRACKING_URI", None)
        # A newcomer's caches: none of ours (the contract's remembered passes, the code hashes:
        # study/code_identity.py); matplotlib's font list stays where it is (any earlier use of matplotlib made it).
        import matplotlib

        env["MPLCONFIGDIR"] = env.get("MPLCONFIGDIR") or matplotlib.get_cachedir()
        env["XDG_CACHE_HOME"] = str(folder / "cache")
        launched = time.time()
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "orchestrator", "run", f"studies/{study_path.name}"],
                              cwd=folder, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - started
        exited = time.time()
        own = [line for line in done.stdout.splitlines() if "Wall time" in line]
        print("\n".join(own) or done.stdout[-2000:])
        if done.returncode != 0:
            print(done.stderr[-4000:], file=sys.stderr)
            raise SystemExit(f"orchestrator run exited {done.returncode}")
        uri = f"sqlite:///{folder / 'mlruns' / 'mlflow.db'}"
        _, trials, spans = stored_runs(uri, name)
        source = "`orchestrator run`, start to exit"
    after = matmul_gflops()
    throughput = max(before, after)
    cores = os.cpu_count() or 1
    total = sum(flops.values())
    limit = total / (cores * throughput * 1e9)
    print(f"study {name}: training {total / 1e12:.2f} TFLOP ("
          + ", ".join(f"{run} {value / 1e12:.2f}" for run, value in flops.items()) + ")")
    print(f"matmul, one thread, (1024x128)@(128x384): {before:.0f} GFLOP/s before, {after:.0f} after; "
          f"{cores} cores")
    print(f"compute limit {limit:.0f} s; wall {wall:.0f} s ({source}); wall / limit {wall / limit:.2f} (goal 2.4)")
    print("\n".join(timeline(spans, launched, exited)))
    for run in sorted(trials):
        print(f"  {run}: " + ", ".join(f"ppl_{length} {value:.4f}" for length, value in sorted(trials[run].items())))
    if folder is not None:
        if args.keep:
            print(f"project folder kept: {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()

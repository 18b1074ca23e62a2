"""What evaluating a study's stored trials at a new length costs, against retraining them, in the same store.

    python tests/benchmarks/bench_evaluate.py [--study studies/kernel_size.yaml] [--lengths 1024] [--local]

Needs the study run first with weights kept (`orchestrator run studies/kernel_size.yaml`). The study's SQLite
store is copied to a temporary folder and, in the copy only, the asked lengths' metrics and the evaluation tags
are removed, so that the evaluation runs from scratch however often this is run (the real store is read, never
written; the kept models are read in place). Then `orchestrator evaluate STUDY --lengths ...` runs on the copy
as a user runs it (a subprocess, on a local Ray unless --local), timed from start to exit. The reference is
what retraining would cost: the trials' runs in the store, from the first one's start to the last one's end (the
study's trial phase as it ran, with its concurrency), and the sum of their run times.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", default=str(ROOT / "studies" / "kernel_size.yaml"))
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024])
    parser.add_argument("--local", action="store_true")
    args = parser.parse_args()
    store = ROOT / "mlruns" / "mlflow.db"
    if not store.is_file():
        sys.exit(f"no store at {store}: run `orchestrator run {args.study}` first")
    with tempfile.TemporaryDirectory(prefix="bench_evaluate_") as folder:
        copy = Path(folder) / "mlflow.db"
        shutil.copy(store, copy)
        trials = _forget(copy, args.lengths)
        command = [sys.executable, "-m", "orchestrator", "evaluate", args.study, "--lengths",
                   *map(str, args.lengths), "--tracking-uri", f"sqlite:///{copy}", "--reports-dir",
                   str(Path(folder) / "reports")] + (["--local"] if args.local else [])
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        wall = time.perf_counter() - started
        if done.returncode != 0:
            sys.exit(f"evaluate failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        seconds = _evaluation_seconds(copy)
    first, last = min(t[1] for t in trials), max(t[2] for t in trials)
    trained = sum(t[2] - t[1] for t in trials) / 1000
    print(f"{Path(args.study).stem}: {len(trials)} stored trial(s) evaluated at {args.lengths} "
          f"({'in-process' if args.local else 'on the local Ray'}, {os.cpu_count()} CPUs, shared machine):")
    print("| | wall s | trial work s |")
    print("|---|---:|---:|")
    print(f"| orchestrator evaluate --lengths {' '.join(map(str, args.lengths))} | {wall:.1f} | {seconds:.1f} |")
    print(f"| retraining (the study's trial runs as they ran) | {(last - first) / 1000:.1f} | {trained:.1f} |")
    print(f"| ratio | {wall / ((last - first) / 1000):.2f}x | {seconds / trained:.2f}x |")


def _forget(path: Path, lengths: list[int]) -> list[tuple[str, int, int]]:
    """In the copy: drop the asked lengths' metrics and every evaluation tag; returns the FINISHED trial runs
    (run id, start ms, end ms)."""
    names = [f"{prefix}_{length}" for length in lengths for prefix in ("ppl", "delta_p")]
    with sqlite3.connect(path) as db:
        marks = ",".join("?" * len(names))
        for table in ("metrics", "latest_metrics"):
            db.execute(f"DELETE FROM {table} WHERE key IN ({marks})", names)
        steps = ",".join("?" * len(lengths))
        db.execute(f"DELETE FROM metrics WHERE key IN ('ppl_by_length', 'delta_p_by_length') AND step IN ({steps})",
                   lengths)
        db.execute("DELETE FROM tags WHERE key LIKE 'orchestrator.evaluation.%'")
        return db.execute("SELECT r.run_uuid, r.start_time, r.end_time FROM runs r JOIN tags t ON t.run_uuid = "
                          "r.run_uuid WHERE t.key = 'orchestrator.role' AND t.value = 'trial' AND r.status = "
                          "'FINISHED'").fetchall()


def _evaluation_seconds(path: Path) -> float:
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT value FROM tags WHERE key LIKE 'orchestrator.evaluation.%'").fetchall()
    return sum(json.loads(value)["seconds"] for (value,) in rows)


if __name__ == "__main__":
    main()

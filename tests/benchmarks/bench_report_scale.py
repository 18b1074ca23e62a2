"""The report of a study of hundreds of trials, by phase: a grid of variants x learning rates x widths
(`model.d_dape`; the Kerple baseline does not read it) written into a real MLflow store (SQLite) through the
orchestrator's tracking code with synthetic results (tests/synthetic_store.py: no training, so the time is
the report's), then reported as `orchestrator run` does (build_report, attached to the parent run), then
reported again with nothing changed (a finished study run again): in the measuring process ("unchanged
re-run"), and as the command a user types ("re-run command": `python -m orchestrator run STUDY` in a new
process, its wall time from start to exit: Python's start, the imports, the store, the report kept).

    python tests/benchmarks/bench_report_scale.py                 # 240 and 1,000 trials, this code
    python tests/benchmarks/bench_report_scale.py --reference DIR # also the code checked out in DIR, in the
                                                                  # same run (ratios: this / reference)
    python tests/benchmarks/bench_report_scale.py --repeat 3      # on a busy machine: each phase's fastest
                                                                  # of 3 reports (drawn again each time)

Each size is measured in a fresh subprocess per code (PYTHONPATH=<code>), so that imports and caches are
the same for both; the store is written by the code that reports it (its own trial identity).
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

HERE = Path(__file__).resolve().parent
SIZES = {240: (6, 10), 1000: (10, 25)}  # trials: (variants, learning rates); x 4 widths
PHASES = ("results", "tables", "plots", "render", "write+attach", "total", "unchanged re-run", "re-run command")


def yardstick() -> float:
    """Seconds of a fixed workload that no version of the orchestrator changes (matplotlib and pandas alone:
    a figure of 8 panels of 6 lines drawn to PNG and SVG, a group-by of 200,000 rows), timed in the process
    that measures the report, just before it: on a shared machine, `total / yardstick` compares runs made
    under different loads."""
    import io

    import numpy as np
    import pandas as pd
    from matplotlib.figure import Figure

    begin = time.perf_counter()
    fig = Figure(figsize=(14, 6))
    for index, ax in enumerate(fig.subplots(2, 4).flat):
        for line in range(6):
            ax.plot(np.arange(10), np.cos(np.arange(10) / (index + line + 1)), marker="o", label=f"line {line}")
        ax.set_title(f"panel {index}")
    fig.legend(*fig.axes[0].get_legend_handles_labels(), loc="upper right")
    fig.savefig(io.BytesIO(), format="png", dpi=110)
    fig.savefig(io.BytesIO(), format="svg")
    frame = pd.DataFrame({"key": np.arange(200_000) % 997, "value": np.arange(200_000, dtype=float)})
    frame.groupby("key")["value"].agg(["mean", "std", "count"])
    return time.perf_counter() - begin


def study_spec(trials: int) -> dict:
    variants, rates = SIZES[trials]
    names = [("Kerple", {"model.processor": "none"})] + [
        (f"DAPE{k}", {"model.processor": "dapev2", "model.kernel_size": k}) for k in (1, 3, 5, 7, 9, 11, 13, 15, 17)]
    return {
        "name": f"scale_{trials}",
        "description": f"Report benchmark: {trials} rows, synthetic results.",
        "base": {"model": {"preset": "tiny", "pos_encoding": "kerple"},
                 "train": {"steps": 1000, "batch_size": 8, "seq_len": 64},
                 "eval": {"lengths": [64, 128, 256, 512], "tail_tokens": 32}},
        "axes": {"train.lr": [round(1e-4 * 1.5 ** i, 6) for i in range(rates)], "model.d_dape": [4, 8, 16, 32]},
        "variants": [{"label": label, "set": changes, **({"baseline": True} if label == "Kerple" else {})}
                     for label, changes in names[:variants]],
        "resources": {"cpus": 1},
    }


def measure(trials: int, folder: Path, repeat: int = 1) -> dict:
    """In this process (the code on PYTHONPATH): write the store, report it `repeat` times (each phase: the
    fastest of them; on a busy machine the fastest is the least disturbed), then run the finished study
    again (the report unchanged, kept), timing each phase."""
    sys.path.insert(0, str(HERE.parent))  # tests/ for synthetic_store
    import synthetic_store

    from orchestrator import parse_study
    from orchestrator.reporting import build as build_module
    from orchestrator.reporting import render_html, render_latex, render_md
    from orchestrator.reporting.results import study_results
    from orchestrator.run import run_and_report
    from orchestrator.run_context import RunContext
    from orchestrator.tracking.store import StudyStore

    study = parse_study(study_spec(trials))
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    started = time.perf_counter()
    synthetic_store.write_store(study, uri)
    written = time.perf_counter() - started
    store = StudyStore.open(uri, study.name)

    phases: dict[str, float] = {}
    originals = {"results": (build_module, "study_results"), "tables": (build_module, "build_tables"),
                 "plots": (build_module, "_figures"), "render": None}
    timed = {}

    def timer(name, function):
        def wrapped(*args, **kwargs):
            begin = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                timed[name] = timed.get(name, 0.0) + time.perf_counter() - begin
        return wrapped

    for name, target in originals.items():
        if target:
            module, attribute = target
            setattr(module, attribute, timer(name, getattr(module, attribute)))
    for renderer in (render_md, render_html, render_latex):
        renderer.render = timer("render", renderer.render)
    reports = folder / "reports"

    def report_once(rebuild: bool) -> dict[str, float]:
        timed.clear()
        once = {"yardstick": yardstick()}
        begin = time.perf_counter()
        build_module.build_report(RunContext.of(study, store), reports, rebuild=rebuild)
        once["total"] = time.perf_counter() - begin
        once.update({name: timed.get(name, 0.0) for name in ("results", "tables", "plots", "render")})
        once["write+attach"] = once["total"] - sum(timed.values())
        return once

    reports_made = [report_once(rebuild=index > 0) for index in range(repeat)]  # (drawn again each time)
    phases = {phase: min(once[phase] for once in reports_made) for phase in reports_made[0]}
    begin = time.perf_counter()  # `orchestrator run` of the finished study: nothing to train, the report
    outcome = run_and_report(RunContext.create(study, uri, storage_dir=folder / "state", local=True), reports)
    phases["unchanged re-run"] = time.perf_counter() - begin
    assert outcome.trials_run == 0
    plots = sorted(p.name for p in (reports / study.name / "plots").glob("*.png"))
    return {"phases": phases, "rows": len(study_results(store, study)), "runs": len(store.trial_runs()),
            "store_write_s": written, "png": len(plots)}


def run_code(code: Path, trials: int, repeat: int = 1) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench_report_scale_") as folder:
        env = {**os.environ, "PYTHONPATH": f"{code}{os.pathsep}{HERE.parent}", "MLFLOW_DISABLE_TELEMETRY": "true",
               "MPLBACKEND": "Agg"}
        output = subprocess.run([sys.executable, __file__, "--measure", str(trials), "--folder", folder,
                                 "--repeat", str(repeat)],
                                env=env, cwd=code, capture_output=True, text=True, check=False)
        if output.returncode:
            raise SystemExit(f"{code} ({trials} trials) failed:\n{output.stderr[-4000:]}")
        measured = json.loads(output.stdout.strip().splitlines()[-1])
        measured["phases"]["re-run command"] = rerun_command(code, trials, Path(folder), env, repeat)
        return measured


def rerun_command(code: Path, trials: int, folder: Path, env: dict, repeat: int) -> float:
    """`orchestrator run STUDY` of the finished study in a new process, wall seconds (the fastest of `repeat`): run
    once first, so that the parent run has this command's tags (its study file) and the rerun has nothing to do."""
    import yaml

    study_file = folder / "study.yaml"
    study_file.write_text(yaml.safe_dump(study_spec(trials)), encoding="utf-8")
    command = [sys.executable, "-m", "orchestrator", "run", str(study_file), "--tracking-uri",
               f"sqlite:///{folder / 'mlflow.db'}", "--reports-dir", str(folder / "reports"),
               "--storage-dir", str(folder / "state")]
    walls = []
    for _ in range(repeat + 1):
        begin = time.perf_counter()
        done = subprocess.run(command, env=env, cwd=code, capture_output=True, text=True, check=False)
        walls.append(time.perf_counter() - begin)
        if done.returncode or " 0 run, 0 failed" not in done.stdout:
            raise SystemExit(f"{code}: the rerun did not run nothing:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return min(walls[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, nargs="+", default=sorted(SIZES), choices=sorted(SIZES))
    parser.add_argument("--reference", type=Path, help="another checkout of the code (e.g. before a change)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="report each store this many times and show each phase's fastest (a busy machine)")
    parser.add_argument("--measure", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--folder", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.folder, args.repeat)))
        return
    code = HERE.parent.parent
    print(f"Report time by phase, seconds, on {os.cpu_count()} cores" + (f", each the fastest of {args.repeat} reports"
          if args.repeat > 1 else "") + " (one process; the store: SQLite, written "
          "through the orchestrator's recorder with synthetic results, not timed here)")
    for trials in args.trials:
        mine = run_code(code, trials, args.repeat)
        theirs = run_code(args.reference.resolve(), trials, args.repeat) if args.reference else None
        print(f"\n{trials} rows ({mine['runs']} runs in the store; {mine['png']} PNG figures; store written in "
              f"{mine['store_write_s']:.0f} s)"
              + (f"; reference: {theirs['runs']} runs, {theirs['png']} PNG" if theirs else ""))
        header = f"{'phase':<18}{'this code':>10}" + (f"{'reference':>11}{'ratio':>8}" if theirs else "")
        print(header)
        rows = [(phase, mine["phases"][phase], theirs["phases"][phase] if theirs else None) for phase in PHASES]
        if "yardstick" in mine["phases"]:  # a fixed workload, timed in the same process (yardstick())
            stick = [("yardstick", mine["phases"]["yardstick"], theirs["phases"].get("yardstick") if theirs else None)]
            rows += stick + [("total / yardstick", mine["phases"]["total"] / stick[0][1],
                              theirs["phases"]["total"] / stick[0][2] if theirs and stick[0][2] else None)]
        for phase, value, reference in rows:
            line = f"{phase:<18}{value:>10.2f}"
            if theirs and reference is not None:
                line += f"{reference:>11.2f}{value / reference if reference else float('nan'):>8.2f}"
            print(line)


if __name__ == "__main__":
    main()

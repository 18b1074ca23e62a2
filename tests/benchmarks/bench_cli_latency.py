"""How long the `orchestrator` commands take to answer, against the targets of issue 17, on a stored study.

    python tests/benchmarks/bench_cli_latency.py [--study STUDY.yaml --tracking-uri URI] [--repeat 3]

Without a study, the tiny report study of the tests is run first (a minute or more) into a temporary store.
For each command: the median wall time over the repeats, the CPU time of the process (user + system: what
the command costs, whatever the machine's load), and the ratio to a bare `python -c pass` measured in the
same run (the interpreter's own start). `ui` is the time from starting `orchestrator ui` to its printed
address answering with the study's dashboard written. The machine's load average is printed: on a loaded
machine wall times stretch, CPU times much less.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGETS = {"--help": 1.5, "validate": 1.5, "plan": 3.0, "status": 3.0, "report": 5.0, "ui": 15.0}


def _timed(command: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _ui(study: Path, uri: str) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    server = subprocess.Popen([sys.executable, "-m", "orchestrator", "ui", str(study), "--tracking-uri", uri,
                               "--port", str(_free_port())],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in server.stdout:
            if re.search(r"MLflow UI for study \S+: http", line):
                break
        wall = time.perf_counter() - started
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _stored_study(args) -> tuple[Path, str]:
    if args.study:
        return Path(args.study), args.tracking_uri
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import ray
    import report_study

    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    built = report_study.build(Path(tempfile.mkdtemp(prefix="bench_cli_")) / "study")
    ray.shutdown()
    return built.study_file, built.tracking_uri


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--study")
    parser.add_argument("--tracking-uri")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    study, uri = _stored_study(args)
    orchestrator = [sys.executable, "-m", "orchestrator"]
    reports = Path(tempfile.mkdtemp(prefix="bench_reports_"))
    commands = {"--help": orchestrator + ["--help"], "validate": orchestrator + ["validate", str(study)],
                "plan": orchestrator + ["plan", str(study), "--tracking-uri", uri],
                "status": orchestrator + ["status", str(study), "--tracking-uri", uri],
                "report": orchestrator + ["report", str(study), "--tracking-uri", uri, "--reports-dir", str(reports)]}
    bare = statistics.median(_timed([sys.executable, "-c", "pass"])[0] for _ in range(args.repeat))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; bare python start {bare:.2f}s")
    print(f"{'command':10} {'wall s':>8} {'cpu s':>7} {'x python':>9} {'target s':>9}")
    for name, command in commands.items():
        runs = [_timed(command) for _ in range(args.repeat)]
        wall, cpu = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        print(f"{name:10} {wall:8.2f} {cpu:7.2f} {wall / bare:9.1f} {TARGETS[name]:9.1f}")
    wall, cpu = _ui(study, uri)
    print(f"{'ui':10} {wall:8.2f} {cpu:7.2f} {wall / bare:9.1f} {TARGETS['ui']:9.1f}")
    shutil.rmtree(reports, ignore_errors=True)


if __name__ == "__main__":
    main()

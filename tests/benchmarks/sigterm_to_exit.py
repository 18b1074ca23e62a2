"""Seconds from SIGTERM to the orchestrator's exit in the middle of a study (issue: a clean stop must also be a
quick one, inside SLURM's KillWait). Runs the study in a fresh project folder, waits until a trial has logged
`--after-step` steps, sends SIGTERM to the driver alone (as `kill`/scancel do), and prints the exit code, the
seconds to exit, and whether Ray's native stack dump appeared.

    python tests/benchmarks/sigterm_to_exit.py studies/kernel_size.yaml --after-step 100
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _step(database: Path) -> int:
    if not database.is_file():
        return 0
    try:
        connection = sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True, timeout=5)
        try:
            row = connection.execute("SELECT max(step) FROM metrics WHERE key = 'train_loss'").fetchone()
        finally:
            connection.close()
    except sqlite3.Error:
        return 0
    return int(row[0] or 0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("study", type=Path)
    parser.add_argument("--after-step", type=int, default=100)
    args = parser.parse_args()
    project = Path(tempfile.mkdtemp(prefix="sigterm_to_exit_"))
    (project / "studies").mkdir()
    study = project / "studies" / args.study.name
    shutil.copy(args.study, study)
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "run", str(study)], cwd=project,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    database = project / "mlruns" / "mlflow.db"
    try:
        while _step(database) < args.after_step:
            if proc.poll() is not None:
                sys.exit(f"the study ended before step {args.after_step}:\n{proc.stdout.read()}")
            time.sleep(0.5)
        sent = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        lines, said = [], None  # when the last paragraph was printed: the rest is Ray's shutdown at exit
        for line in proc.stdout:
            lines.append(line)
            if "Interrupted by" in line and said is None:
                said = time.monotonic() - sent
        proc.wait(timeout=300)
        seconds, output = time.monotonic() - sent, "".join(lines)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    print(f"exit code {proc.returncode}; SIGTERM to exit {seconds:.1f}s (to the last paragraph "
          f"{said if said is None else round(said, 1)}s); native stack dump: "
          f"{'yes' if 'SIGTERM received' in output else 'no'}")
    print(output.strip().splitlines()[-1][:300])
    shutil.rmtree(project, ignore_errors=True)


if __name__ == "__main__":
    main()

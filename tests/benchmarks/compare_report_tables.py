"""Are the report's tables the same as another checkout's (e.g. before a rewrite of the table code)? For
every catalogue study (studies/*.yaml; default and paper profiles, the search study's grid profile), a store
is written without training (tests/synthetic_store.py: results that depend on each trial's effective
config) and reported by each code in its own process; every table_<family>.csv (each number behind each
table: means, stds, n, best, ratios, p-values, markers) must be equal, cell for cell.

    python tests/benchmarks/compare_report_tables.py --reference DIR   # exit 1 on any difference
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CASES = [(path.stem, profile) for path in sorted((ROOT / "studies").glob("*.yaml"))
         for profile in (("grid",) if path.stem == "search" else (None, "paper"))]


def report(study_name: str, profile: str | None, out: Path) -> None:
    """In this process (the code on PYTHONPATH, and that checkout's tests/synthetic_store.py, which imports
    its modules): a synthetic store of the study, its report into `out`."""
    import synthetic_store

    from orchestrator import load_study
    from orchestrator.reporting import build_report
    from orchestrator.run_context import RunContext

    study = load_study(ROOT / "studies" / f"{study_name}.yaml", profile=profile, check_data=False)
    with tempfile.TemporaryDirectory(prefix="compare_tables_") as folder:
        store = synthetic_store.write_store(study, f"sqlite:///{folder}/mlflow.db")
        build_report(RunContext.of(study, store), out, attach=False)


def run(code: Path, out: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{code}{os.pathsep}{code / 'tests'}", "MLFLOW_DISABLE_TELEMETRY": "true"}
    for name, profile in CASES:
        command = [sys.executable, __file__, "--one", name, profile or "", str(out / (profile or "default"))]
        result = subprocess.run(command, env=env, cwd=code, capture_output=True, text=True)
        if result.returncode:
            raise SystemExit(f"{code}: {name} ({profile}) failed:\n{result.stderr[-3000:]}")


def compare(mine: Path, theirs: Path) -> list[str]:
    import pandas as pd

    problems = []
    for reference in sorted(theirs.glob("*/*/table_*.csv")):
        relative = reference.relative_to(theirs)
        candidate = mine / relative
        if not candidate.is_file():
            problems.append(f"{relative}: missing")
            continue
        try:
            pd.testing.assert_frame_equal(pd.read_csv(candidate), pd.read_csv(reference), check_exact=True)
        except AssertionError as error:
            problems.append(f"{relative}: {str(error).splitlines()[0:6]}")
    extra = ({p.relative_to(mine) for p in mine.glob("*/*/table_*.csv")}
             - {p.relative_to(theirs) for p in theirs.glob("*/*/table_*.csv")})
    problems += [f"{relative}: not in the reference" for relative in sorted(extra)]
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", type=Path)
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        name, profile, out = args.one
        report(name, profile or None, Path(out))
        return
    if args.reference is None:
        parser.error("--reference DIR is required")
    with tempfile.TemporaryDirectory(prefix="compare_tables_") as folder:
        mine, theirs = Path(folder) / "this", Path(folder) / "reference"
        run(ROOT, mine)
        run(args.reference.resolve(), theirs)
        tables = len(list(theirs.glob("*/*/table_*.csv")))
        problems = compare(mine, theirs)
        print(f"{len(CASES)} study/profile cases, {tables} table CSVs of the reference compared cell for cell: "
              f"{'all equal' if not problems else f'{len(problems)} differ'}")
        for problem in problems:
            print(f"  {problem}")
        raise SystemExit(1 if problems else 0)


if __name__ == "__main__":
    main()

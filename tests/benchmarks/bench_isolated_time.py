"""A study's time cost as timed during training (trials sharing the machine) beside the same models timed alone
(`orchestrator evaluate STUDY --time`), with each row's ratio to the baseline both ways.

    python tests/benchmarks/bench_isolated_time.py [--study studies/kernel_size.yaml] [--length 512]

Reads the study's store (run the study, then `orchestrator evaluate STUDY --time`): per row, the in-training
`ms_per_step` with how many trials ran at once meanwhile (`concurrent_trials_max`, `concurrent_trials_mean`),
the isolated `isolated_ms_per_step` with its quartiles, and the same for the evaluation batch's forward at
`--length`. Ratios are to the study's baseline row, within each column.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", default=str(ROOT / "studies" / "kernel_size.yaml"))
    parser.add_argument("--length", type=int, default=512)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from orchestrator.reporting import load_results

    frame = load_results(args.study)
    frame = frame[(frame["in_study"]) & (frame["status"] == "FINISHED")].sort_values("row_index")
    if "isolated_ms_per_step" not in frame.columns:
        sys.exit(f"no isolated timings: run `orchestrator evaluate {args.study} --time` first")
    base = frame[frame["baseline"]].iloc[0]
    fwd, alone_fwd = f"ms_forward_{args.length}", f"isolated_ms_forward_{args.length}"
    print(f"{Path(args.study).stem}: ms per training step and per evaluation batch at L={args.length}, "
          "during training vs alone (ratio to the baseline)")
    print("| variant | trials at once (max / mean) | ms/step in training | ms/step alone [q1, q3] | "
          f"ms/fwd L={args.length} in training | ms/fwd alone [q1, q3] |")
    print("|---|---:|---:|---:|---:|---:|")
    for _, row in frame.iterrows():
        print(f"| {row['label']} | {row['concurrent_trials_max']:.0f} / {row['concurrent_trials_mean']:.2f} | "
              f"{row['ms_per_step']:.1f} ({row['ms_per_step'] / base['ms_per_step']:.2f}x) | "
              f"{row['isolated_ms_per_step']:.1f} [{row['isolated_ms_per_step_q1']:.1f}, "
              f"{row['isolated_ms_per_step_q3']:.1f}] "
              f"({row['isolated_ms_per_step'] / base['isolated_ms_per_step']:.2f}x) | "
              f"{_cell(row, base, fwd)} | "
              f"{row[alone_fwd]:.1f} [{row[alone_fwd + '_q1']:.1f}, {row[alone_fwd + '_q3']:.1f}] "
              f"({row[alone_fwd] / base[alone_fwd]:.2f}x) |")


def _cell(row, base, column: str) -> str:
    """The in-training value with its ratio, or – where the trial did not time that length while training."""
    if column not in row or row[column] != row[column]:
        return "–"
    return f"{row[column]:.1f} ({row[column] / base[column]:.2f}x)"


if __name__ == "__main__":
    main()

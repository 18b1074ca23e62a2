"""What the component contract (dape_core/contract.py) costs at `validate`, per built-in component and per
example plugin, on this machine's CPU, in one run.

    python tests/benchmarks/bench_contract.py [--reps 3]

For each component (every registered encoding alone; every processor and form over an encoding; DAPE V2's
taller kernels; the example plugin examples/kq_conv.py), the median of `--reps` runs of every check of the
contract (`dape_core.contract.refusals`), after one warm-up run of the whole table (the first model a process
builds imports torch's checkpointing machinery, seconds once). The reference, measured in the same run: one
training step (forward and backward) of the `tiny` preset with DAPE V2 over Kerple at 4 x 128 tokens; the
last column is the contract's time in such steps, so that a timing on a loaded machine still compares.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
from tabulate import tabulate

from dape_core import ModelConfig, build_model, components, plugins
from dape_core.contract import refusals

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def cases() -> list[tuple[str, str, dict]]:
    """(component, owner, the model that exercises it)."""
    components.discover_contrib()
    plugins.load("kq_conv.py", EXAMPLES)
    rows = [(f"encoding {name}", record.owner, {"pos_encoding": name}) for name, record in components.encodings.items()]
    rows += [(f"processor {name}", record.owner, {"pos_encoding": "kerple", "processor": name})
             for name, record in components.processors.items() if record.present]
    rows += [(f"form {name} (dapev2 1x3)", form.owner, {"pos_encoding": "alibi", "processor": "dapev2", "form": name})
             for name, form in components.forms.items() if form.choice]
    rows += [("processor dapev2 2x3", "built-in",
              {"pos_encoding": "rope", "processor": "dapev2", "kernel_size": (2, 3)}),
             ("processor kq_conv 3x5", "kq_conv", {"pos_encoding": "kerple", "processor": "kq_conv",
                                                   "options": {"kq_rows": 3, "kq_cols": 5}})]
    return rows


def step_seconds(reps: int) -> float:
    """Median time of one training step of the reference model (module docstring)."""
    model = build_model(ModelConfig(preset="tiny", pos_encoding="kerple", processor="dapev2", d_dape=16))
    tokens = torch.randint(0, 256, (4, 129))
    times = []
    for _ in range(reps + 1):
        start = time.perf_counter()
        model(tokens[:, :-1], tokens[:, 1:])[1].backward()
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    table = cases()
    for _, _, fields in table:  # warm-up (module docstring)
        assert refusals(ModelConfig(**fields)) == [], fields
    reference = step_seconds(args.reps)
    rows = []
    for name, owner, fields in table:
        model = ModelConfig(**fields)
        times = []
        for _ in range(args.reps):
            start = time.perf_counter()
            refusals(model)
            times.append(time.perf_counter() - start)
        seconds = statistics.median(times)
        rows.append([name, owner, f"{seconds:.3f}", f"{seconds / reference:.2f}"])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; reference: one training step of the tiny "
          f"preset (DAPE V2 over Kerple, 4 x 128 tokens) = {reference * 1000:.1f} ms; median of {args.reps}\n")
    print(tabulate(rows, headers=["component", "owner", "contract (s)", "in training steps"]))
    total = sum(float(row[2]) for row in rows)
    print(f"\nall {len(rows)}: {total:.2f} s; the slowest {max(float(row[2]) for row in rows):.3f} s")


if __name__ == "__main__":
    main()

"""The torch side of `orchestrator doctor`: does this machine compute what the papers define, and how fast?

- `exactness`: the fused attention kernels against the direct path (the reference formulation), output and every
  gradient, at small sizes on this device (on CPU in Triton's interpreter), with the first-call self-check's cost;
- `benchmark`: Kerple against DAPE1x3-Kerple, a training step and an evaluation, on each attention path that
  applies here (fused, block, direct), as ratios to Kerple;
- `distributed`: with two or more GPUs, a DDP and an FSDP step against one device's.

Each check gives `Outcome`s (PASS, FAIL or SKIP with a line of detail); nothing here knows Ray or MLflow.
"""

from __future__ import annotations

from dataclasses import dataclass

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"


@dataclass(frozen=True)
class Outcome:
    status: str  # PASS, FAIL or SKIP
    name: str
    detail: str = ""

    def line(self) -> str:
        return f"{self.status} {self.name}" + (f": {self.detail}" if self.detail else "")

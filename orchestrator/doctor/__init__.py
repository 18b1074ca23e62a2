"""`orchestrator doctor`: does this machine (and the cluster and store it is given) compute what the papers
define, and how fast? One report, in sections, each check a PASS, FAIL or SKIP line:

1. the environment (dape_core.environment: torch build and CUDA, driver, Triton, the packages that matter; each
   GPU and its memory) and whether CUDA and Triton are usable;
2. the Ray cluster (`--address`) and the MLflow store (`--tracking-uri`), each bounded in time (reach.py);
3. the fused attention kernels against the direct path on this device (dape_core.doctor.exactness; on CPU in
   Triton's interpreter at tiny sizes), with their first-call self-check's cost;
4. with two or more GPUs, DDP and FSDP steps against one device's (dape_core.doctor.distributed);
5. unless `--quick`: a short benchmark, Kerple against DAPE1x3-Kerple per attention path, as a ratio table
   (dape_core.doctor.benchmark).

The exit code is 1 when a check fails, else 0 (a SKIP is not a failure). On a machine without CUDA it says
plainly that the GPU checks did not run.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from dape_core.doctor import FAIL, PASS, SKIP, Outcome

GPU_CHECKS = ("the kernels compiled for a GPU, with bfloat16 products", "the 125M benchmark",
              "DDP and FSDP over NCCL")


@dataclass
class Report:
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(outcome.status == FAIL for outcome in self.outcomes)

    def counts(self) -> str:
        return ", ".join(f"{sum(o.status == status for o in self.outcomes)} {word}"
                         for status, word in ((PASS, "passed"), (FAIL, "failed"), (SKIP, "skipped")))


def prepare_interpreter() -> None:
    """Without CUDA the kernels run in Triton's interpreter, which Triton reads when it is first imported: set it
    before anything imports Triton (nothing here has yet)."""
    import torch

    if not torch.cuda.is_available() and "triton" not in sys.modules:
        os.environ.setdefault("TRITON_INTERPRET", "1")


def run_doctor(address: str | None = None, tracking_uri: str | None = None, quick: bool = False,
               timeout: float = 10.0, say: Callable[[str], None] = print,
               progress: Callable[[str], None] = lambda text: None) -> Report:
    prepare_interpreter()
    import torch

    from dape_core.doctor import distributed, exactness

    from . import reach

    report = Report()
    started = time.perf_counter()

    def record(outcome: Outcome) -> None:
        report.outcomes.append(outcome)
        say(outcome.line())

    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    say("## Environment")
    for line in environment_lines(device):
        say(line)
    record(cuda_outcome())
    record(triton_outcome(cuda))
    say("")
    say("## Cluster and tracking store")
    record(reach.ray_cluster(address, timeout))
    record(reach.tracking_store(tracking_uri, timeout))
    say("")
    say(f"## Fused attention kernels = the direct path, on {device}"
        + ("" if cuda else " (Triton's interpreter: tiny sizes, float32)"))
    for outcome in guarded("fused kernels' exactness", lambda: exactness.run(device)):
        record(outcome)
    say("")
    say("## Distributed training")
    for outcome in guarded("DDP and FSDP steps = one device's", distributed.run):
        record(outcome)
    if not quick:
        from dape_core.doctor import benchmark

        setting = benchmark.default_setting(device)
        say("")
        say(f"## Benchmark: {setting.describe(device)}")
        rows = benchmark.run(device, setting, lambda row: progress(f"  benchmark {row.phase} {row.variant} done"))
        say(benchmark.table(rows))
    say("")
    say(f"## Summary: {report.counts()} in {time.perf_counter() - started:.0f} s")
    if not cuda:
        say(f"No CUDA device here: the GPU checks did not run ({'; '.join(GPU_CHECKS)}). Run `orchestrator "
            "doctor` on a GPU node of the cluster for them.")
    return report


def guarded(name: str, check: Callable[[], list[Outcome]]) -> list[Outcome]:
    """A section's outcomes, or one FAIL saying what went wrong where it raised (the other sections still run)."""
    try:
        return check()
    except Exception as error:  # noqa: BLE001 - an error of this machine is what the doctor reports
        return [Outcome(FAIL, name, f"{type(error).__name__}: {error}"[:500].replace("\n", " "))]


def environment_lines(device) -> list[str]:
    import torch

    from dape_core.environment import PACKAGES, describe_environment

    env = describe_environment(device)
    lines = [f"python {env['python']} on {env['platform']}",
             f"torch {env['torch']} (CUDA {env['torch_cuda']}, cuDNN {env['cudnn']}), NVIDIA driver "
             f"{env['cuda_driver']}",
             "packages: " + ", ".join(f"{name} {env[name]}" for name in PACKAGES),
             f"device {env['device']}: {env['device_model']}; {env['cpu_count']} CPUs, {env['torch_threads']} torch "
             f"threads, {env['gpu_count']} GPU(s)"]
    if torch.cuda.is_available():
        for index in range(torch.cuda.device_count()):
            properties = torch.cuda.get_device_properties(index)
            lines.append(f"GPU {index}: {properties.name}, {properties.total_memory / 2**30:.1f} GiB, "
                         f"sm_{properties.major}{properties.minor}, {properties.multi_processor_count} SMs")
    return lines


def cuda_outcome() -> Outcome:
    import torch

    if not torch.cuda.is_available():
        build = "a CPU build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}, but sees no GPU"
        return Outcome(SKIP, "CUDA", f"no CUDA device (torch {torch.__version__} is {build})")
    names = []
    for index in range(torch.cuda.device_count()):
        try:
            x = torch.arange(256, dtype=torch.float32, device=f"cuda:{index}")  # every partial sum exact in float32
            expected = float(sum(i * i for i in range(256)))
            if abs((x @ x).item() - expected) > 1e-6 * expected:
                return Outcome(FAIL, "CUDA", f"GPU {index} computed a wrong dot product")
        except RuntimeError as error:
            return Outcome(FAIL, "CUDA", f"GPU {index}: {error}"[:300])
        names.append(torch.cuda.get_device_name(index))
    return Outcome(PASS, "CUDA", f"{len(names)} GPU(s) compute: {', '.join(names)}")


def triton_outcome(cuda: bool) -> Outcome:
    from dape_core import fused

    problem = fused.triton_problem()
    if problem is None:
        from dape_core.environment import package_version

        where = "on the GPUs" if cuda else "in its interpreter here (tests, this doctor)"
        return Outcome(PASS, "Triton", f"{package_version('triton')}: the fused attention kernels run {where}")
    if cuda:
        return Outcome(FAIL, "Triton", f"{problem}: DAPE trials would run on the block or direct path (correct, "
                                       "slower)")
    return Outcome(SKIP, "Triton", problem)

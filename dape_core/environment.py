"""What software and hardware a run used, as plain strings: package versions, CUDA and its driver, the device
model and the thread count. A trial records it from the process that trained (a cluster's workers may differ
from the machine that launched them), so a number can say where it was obtained.

Pure torch and the standard library: package versions come from importlib.metadata (a package that is not
installed reads "absent"), never by importing it. Cheap to call: no subprocess unless CUDA is available, and
then nvidia-smi is bounded by a timeout.
"""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata

import torch

_PACKAGES = ("triton", "ray", "mlflow", "optuna", "pydantic", "numpy")
_SMI_TIMEOUT_S = 5.0


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux), else what the platform says, else "unknown"."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    name = line.split(":", 1)[1].strip()
                    if name:
                        return name
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _cuda_driver() -> str:
    """The NVIDIA driver's version from nvidia-smi; torch's CUDA runtime does not know it."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=_SMI_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    versions = sorted({line.strip() for line in out.stdout.splitlines() if line.strip()})
    return ", ".join(versions) if out.returncode == 0 and versions else "unknown"


def describe_environment(device: str | torch.device | None = None) -> dict[str, str]:
    """The environment of this process for a run on `device` (default: CUDA's current device where there is
    one, else the CPU). Every value is a string; the keys are fixed (README, "Provenance")."""
    cuda = torch.cuda.is_available()
    if device is None:
        device = f"cuda:{torch.cuda.current_device()}" if cuda else "cpu"
    device = torch.device(device)
    on_gpu = device.type == "cuda" and cuda
    if on_gpu:
        index = device.index if device.index is not None else torch.cuda.current_device()
        properties = torch.cuda.get_device_properties(index)
        model, memory = properties.name, f"{properties.total_memory / 2**30:.1f}"
    else:
        model, memory = cpu_model(), "n/a"
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    facts = {
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda or "none",
        "cudnn": str(cudnn) if cudnn else "none",
    }
    facts.update({name: package_version(name) for name in _PACKAGES})
    facts.update({
        "cuda_driver": _cuda_driver() if cuda else "none",
        "device": str(device),
        "device_model": model,
        "device_memory_gb": memory,
        "gpu_count": str(torch.cuda.device_count() if cuda else 0),
        "torch_threads": str(torch.get_num_threads()),
        "cpu_count": str(os.cpu_count() or 0),
    })
    return facts

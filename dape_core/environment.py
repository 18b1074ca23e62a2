"""What software and hardware a run used, as one flat dict of strings: package versions, CUDA and its driver,
the device model and the thread count. A trial records it from the process that trained (a cluster's workers may
differ from the machine that launched them), so a number can say where it was obtained; `orchestrator doctor`
prints it.

Pure torch and the standard library (package versions through importlib.metadata, without importing the
packages); cheap: a subprocess (nvidia-smi, bounded by a timeout) only where CUDA is available.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import subprocess
import sys

import torch

PACKAGES = ("triton", "ray", "mlflow", "optuna", "pydantic", "numpy")
NVIDIA_SMI_TIMEOUT_S = 5.0


def describe_environment(device: str | torch.device | None = None) -> dict[str, str]:
    """Versions and the device: keys python, platform, torch, torch_cuda, cudnn, the PACKAGES, cuda_driver,
    device (the one given, else cuda:0 where CUDA is available, else cpu), device_model, device_memory_gb,
    gpu_count, torch_threads, cpu_count. A package that is not installed is "absent"."""
    cuda = torch.cuda.is_available()
    device = torch.device(device) if device is not None else torch.device("cuda:0" if cuda else "cpu")
    on_gpu = device.type == "cuda" and cuda
    info = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda or "none",
        "cudnn": str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else "none",
    }
    info.update({name: package_version(name) for name in PACKAGES})
    info["cuda_driver"] = cuda_driver() if cuda else "none"
    info["device"] = str(device)
    if on_gpu:
        index = device.index if device.index is not None else torch.cuda.current_device()
        properties = torch.cuda.get_device_properties(index)
        info["device_model"] = properties.name
        info["device_memory_gb"] = f"{properties.total_memory / 2**30:.1f}"
    else:
        info["device_model"] = cpu_model()
        info["device_memory_gb"] = "n/a"
    info["gpu_count"] = str(torch.cuda.device_count() if cuda else 0)
    info["torch_threads"] = str(torch.get_num_threads())
    info["cpu_count"] = str(os.cpu_count())
    return info


def package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


@functools.cache
def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    name = line.split(":", 1)[1].strip()
                    if name:
                        return name
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


@functools.cache
def cuda_driver() -> str:
    """The NVIDIA driver's version (nvidia-smi; several GPUs with different drivers: each), else "unknown"."""
    try:
        answer = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=True)
        versions = sorted({line.strip() for line in answer.stdout.splitlines() if line.strip()})
        if versions:
            return ", ".join(versions)
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


if __name__ == "__main__":  # python -m dape_core.environment
    for key, value in describe_environment(sys.argv[1] if len(sys.argv) > 1 else None).items():
        print(f"{key}: {value}")

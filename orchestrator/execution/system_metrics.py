"""What the hardware did while a trial ran, sampled by the process that runs it.

A `SystemSampler` thread takes a sample every `interval` seconds (bounded: INTERVAL_S by default, never more
often than MIN_INTERVAL_S) and one more when it stops, so that even a trial shorter than the interval has
one: the machine's CPU and memory, this process's CPU and resident memory (psutil), and, where an NVIDIA GPU is
present, each of the trial's GPUs' utilisation, memory and power (NVML, through `pynvml` from the
`nvidia-ml-py` package, imported only then; power only where the driver reports it). Names: MLflow's own
system metrics (dape_core/metric_names.py), so MLflow's UI shows them in the run's system metrics view.

The samples travel to the driver with the trial's results (`attach` wraps the trial's report function: each
result carries the samples taken since the one before, as JSON under trial/protocol.py's
SYSTEM_METRICS_KEY), and the driver's recorder writes them: the driver stays the single writer of the store.
The final result also carries the means over all samples (`means`), which the report's trials table shows.
A failing probe (a GPU that stops answering) drops that value, never the trial.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Callable

import dape_core.metric_names as names

from ..trial.protocol import FINAL_FLAG, SYSTEM_METRICS_KEY, Sample, encode_samples

INTERVAL_S = 10.0  # MLflow's own default sampling interval
MIN_INTERVAL_S = 0.5


def visible_handles(nvml, visible: str | None) -> list:
    """NVML's handles of the GPUs CUDA shows this process, in CUDA's order: CUDA_VISIBLE_DEVICES's entries
    (NVML indices or GPU UUIDs, as Ray and SLURM set them), every GPU where it is unset."""
    if visible is None:
        return [nvml.nvmlDeviceGetHandleByIndex(index) for index in range(nvml.nvmlDeviceGetCount())]
    devices = [device.strip() for device in visible.split(",") if device.strip() and device.strip() != "NoDevFiles"]
    return [nvml.nvmlDeviceGetHandleByIndex(int(device)) if device.isdigit() else nvml.nvmlDeviceGetHandleByUUID(device)
            for device in devices]


class _Gpus:
    """The trial's GPUs through NVML: CUDA_VISIBLE_DEVICES (indices or UUIDs) as CUDA numbers them, all of the
    machine's where it is unset. `None` from `open` where there is no NVIDIA driver or no pynvml."""

    def __init__(self, nvml, handles: list):
        self.nvml, self.handles = nvml, handles
        self.no_power: set[int] = set()

    @classmethod
    def open(cls) -> "_Gpus | None":
        if not (Path("/proc/driver/nvidia").exists() or Path("/dev/nvidiactl").exists()):
            return None
        try:
            import pynvml

            pynvml.nvmlInit()
            handles = visible_handles(pynvml, os.environ.get("CUDA_VISIBLE_DEVICES"))
        except Exception:  # no pynvml, no driver, an unknown device: no GPU metrics, the trial goes on
            return None
        return cls(pynvml, handles) if handles else None

    def sample(self, values: dict[str, float]) -> None:
        nvml = self.nvml
        for index, handle in enumerate(self.handles):
            try:
                rates = nvml.nvmlDeviceGetUtilizationRates(handle)
                values[names.gpu_metric(index, names.GPU_UTILIZATION)] = float(rates.gpu)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                values[names.gpu_metric(index, names.GPU_MEMORY_MB)] = memory.used / 1e6
                values[names.gpu_metric(index, names.GPU_MEMORY_PERCENT)] = memory.used / memory.total * 100
            except Exception:
                continue
            if index in self.no_power:
                continue
            try:  # not every board or driver reports power
                watts = nvml.nvmlDeviceGetPowerUsage(handle) / 1000
                limit = nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000
                values[names.gpu_metric(index, names.GPU_POWER_WATTS)] = watts
                values[names.gpu_metric(index, names.GPU_POWER_PERCENT)] = watts / limit * 100 if limit else 0.0
            except Exception:
                self.no_power.add(index)

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:
            pass


class SystemSampler:
    def __init__(self, interval: float = INTERVAL_S, gpus: bool = True):
        import psutil

        self.interval = max(MIN_INTERVAL_S, interval)
        self._psutil = psutil
        self._process = psutil.Process()
        # The first call of each cpu_percent starts its measurement (it returns 0.0): from here on, each
        # sample covers the time since the one before.
        psutil.cpu_percent(None)
        self._process.cpu_percent(None)
        self._gpus = _Gpus.open() if gpus else None
        self._lock = threading.Lock()
        self._pending: list[Sample] = []
        self._count = 0
        self._cpu_sum = self._gpu_sum = 0.0
        self._gpu_samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "SystemSampler":
        self._thread = threading.Thread(target=self._run, name="system-metrics", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> dict[str, float]:
        """Take one sample now (the thread calls this every interval) and keep it for the next result."""
        psutil = self._psutil
        values: dict[str, float] = {}
        try:
            values[names.SYSTEM_CPU_UTILIZATION] = float(psutil.cpu_percent(None))
            memory = psutil.virtual_memory()
            values[names.SYSTEM_MEMORY_MB] = memory.used / 1e6
            values[names.SYSTEM_MEMORY_PERCENT] = memory.used / memory.total * 100
            values[names.PROCESS_CPU_UTILIZATION] = float(self._process.cpu_percent(None))
            values[names.PROCESS_MEMORY_MB] = self._process.memory_info().rss / 1e6
        except Exception:  # psutil failed to read /proc (the process is ending): what was read is kept
            pass
        if self._gpus is not None:
            self._gpus.sample(values)
        gpu = [value for key, value in values.items()
               if key.startswith(names.GPU_PREFIX) and key.endswith(names.GPU_UTILIZATION)]
        with self._lock:
            self._pending.append((int(time.time() * 1000), values))
            self._count += 1
            self._cpu_sum += values.get(names.PROCESS_CPU_UTILIZATION, 0.0)
            if gpu:
                self._gpu_sum += sum(gpu) / len(gpu)
                self._gpu_samples += 1
        return values

    def take(self) -> list[Sample]:
        """The samples taken since the last call."""
        with self._lock:
            taken, self._pending = self._pending, []
        return taken

    def means(self) -> dict[str, float]:
        """The means over every sample so far: this process's CPU, the GPUs' utilisation where there are any."""
        with self._lock:
            if not self._count:
                return {}
            found = {names.MEAN_CPU_UTILIZATION: self._cpu_sum / self._count, names.SYSTEM_SAMPLES: float(self._count)}
            if self._gpu_samples:
                found[names.MEAN_GPU_UTILIZATION] = self._gpu_sum / self._gpu_samples
            return found

    def stop(self) -> None:
        """Stop the thread and take the last sample (the time since the one before)."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.sample()
        if self._gpus is not None:
            self._gpus.close()

    def attach(self, report: Callable[[dict], None]) -> Callable[[dict], None]:
        """`report` with the samples taken since the last result added to each result (the final one, which
        carries FINAL_FLAG, after a last sample and with the means). An empty result (a rank other than 0 of
        a multi-worker trial) is passed on as it is."""
        def reporting(result: dict) -> None:
            if result:
                if result.get(FINAL_FLAG):
                    self.stop()
                    result = {**result, **self.means()}
                samples = self.take()
                if samples:
                    result = {**result, SYSTEM_METRICS_KEY: encode_samples(samples)}
            report(result)

        return reporting


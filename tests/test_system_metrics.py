"""The system-metric sampler of a trial's process (orchestrator/execution/system_metrics.py): MLflow's own
names, a bounded interval, a last sample at the end, the samples riding on the trial's results and their
means on the final one. Fast: no trial here (tests/test_run_record.py checks them on real trial runs)."""

from __future__ import annotations

import time

from dape_core import metric_names as names
from orchestrator.execution.system_metrics import MIN_INTERVAL_S, SystemSampler
from orchestrator.trial.protocol import FINAL_FLAG, SYSTEM_METRICS_KEY, decode_samples


def busy(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_samples_ride_on_the_results_and_the_final_one_carries_their_means():
    sent: list[dict] = []
    sampler = SystemSampler(interval=0.5).start()
    report = sampler.attach(sent.append)
    busy(1.3)  # two samples of a busy process at least
    report({"step": 1, "train_loss": 2.0})
    report({})  # a rank other than 0 of a multi-worker trial: passed on as it is
    busy(0.2)
    report({FINAL_FLAG: 1, "step": 2})
    assert sent[1] == {}
    samples = [decode_samples(result[SYSTEM_METRICS_KEY]) for result in (sent[0], sent[2])]
    assert len(samples[0]) >= 2 and len(samples[1]) >= 1  # the last one taken at the final result
    times = [ms for batch in samples for ms, _ in batch]
    assert times == sorted(times)
    for _, values in samples[0]:
        assert {names.SYSTEM_CPU_UTILIZATION, names.SYSTEM_MEMORY_MB, names.SYSTEM_MEMORY_PERCENT,
                names.PROCESS_CPU_UTILIZATION, names.PROCESS_MEMORY_MB} <= set(values)
        assert values[names.PROCESS_MEMORY_MB] > 1 and 0 <= values[names.SYSTEM_MEMORY_PERCENT] <= 100
    final = sent[2]
    count = sum(len(batch) for batch in samples)
    assert final[names.SYSTEM_SAMPLES] == count
    cpu = [values[names.PROCESS_CPU_UTILIZATION] for batch in samples for _, values in batch]
    assert abs(final[names.MEAN_CPU_UTILIZATION] - sum(cpu) / len(cpu)) < 1e-6
    assert final[names.MEAN_CPU_UTILIZATION] > 5  # it was busy (2 cores shared by many: not near 100)
    assert not sampler._thread.is_alive()  # stopped at the final result


def test_the_names_are_mlflows_own_and_the_interval_is_bounded():
    from mlflow.system_metrics.metrics.cpu_monitor import CPUMonitor

    monitor = CPUMonitor()
    monitor.collect_metrics()
    sampler = SystemSampler(interval=0.0)
    assert sampler.interval == MIN_INTERVAL_S
    values = sampler.sample()
    sampler.stop()
    assert {f"system/{key}" for key in monitor.metrics} <= set(values)
    # MLflow's GPU monitor's names, for the GPUs (gpu_<i>_<key>).
    assert names.gpu_metric(0, names.GPU_UTILIZATION) == "system/gpu_0_utilization_percentage"
    assert names.gpu_metric(1, names.GPU_POWER_WATTS) == "system/gpu_1_power_usage_watts"


class FakeNvml:
    """NVML's calls the sampler makes, for two GPUs of which the second reports no power (a fault injected:
    this machine has no NVIDIA driver; a GPU machine runs the real one)."""

    class NVMLError(Exception):
        pass

    def nvmlDeviceGetCount(self):
        return 3

    def nvmlDeviceGetHandleByIndex(self, index):
        return f"gpu{index}"

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return f"uuid:{uuid}"

    def nvmlDeviceGetUtilizationRates(self, handle):
        return type("Rates", (), {"gpu": 80 if handle == "gpu2" else 40})()

    def nvmlDeviceGetMemoryInfo(self, handle):
        return type("Memory", (), {"used": 2e9, "total": 8e9})()

    def nvmlDeviceGetPowerUsage(self, handle):
        if handle != "gpu2":
            raise self.NVMLError("Not Supported")
        return 150_000  # mW

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return 300_000


def test_gpus_are_the_ones_cuda_shows_and_power_only_where_the_driver_reports_it():
    from orchestrator.execution.system_metrics import _Gpus, visible_handles

    nvml = FakeNvml()
    assert visible_handles(nvml, None) == ["gpu0", "gpu1", "gpu2"]
    assert visible_handles(nvml, "2,GPU-1a2b") == ["gpu2", "uuid:GPU-1a2b"]  # Ray's and SLURM's two spellings
    assert visible_handles(nvml, "NoDevFiles") == []
    gpus = _Gpus(nvml, visible_handles(nvml, "2,0"))
    values: dict[str, float] = {}
    gpus.sample(values)
    # gpu_0 is CUDA's device 0 of this process (NVML's GPU 2); gpu_1 (NVML's 0) reports no power.
    assert values[names.gpu_metric(0, names.GPU_UTILIZATION)] == 80
    assert values[names.gpu_metric(0, names.GPU_POWER_WATTS)] == 150
    assert values[names.gpu_metric(0, names.GPU_POWER_PERCENT)] == 50
    assert values[names.gpu_metric(1, names.GPU_MEMORY_MB)] == 2000
    assert values[names.gpu_metric(1, names.GPU_MEMORY_PERCENT)] == 25
    assert names.gpu_metric(1, names.GPU_POWER_WATTS) not in values and gpus.no_power == {1}
    # The mean GPU utilisation a trial's final result carries is over its GPUs and its samples.
    sampler = SystemSampler(gpus=False)
    sampler._gpus = gpus
    sampler.sample()
    sampler.sample()
    assert sampler.means()[names.MEAN_GPU_UTILIZATION] == 60  # (80 + 40) / 2 each time

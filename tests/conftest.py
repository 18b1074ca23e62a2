import os

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


@pytest.fixture(scope="session")
def local_ray():
    """One local Ray for the whole session: starting Ray costs seconds, and studies reuse it."""
    import ray

    # address="local": always a fresh Ray, never a cluster some other process left running.
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()

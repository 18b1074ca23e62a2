"""The suite's shared fixtures, and how to run it.

    python -m pytest -m "not slow"    # the inner loop (docs/guides/testing.md)
    python -m pytest                  # the whole suite: what CI and README's `bash .ci/run` run

The inner loop's count and time: docs/benchmarks/tests.md. It leaves out the tests marked `slow` (pyproject's
marker says which kind): real studies (through Ray Tune and Ray Train, or in-process), the evaluate command on
stored trials, two-worker DDP/FSDP training and other whole training runs, the doctor's checks, killed processes,
SLURM, the two-node cluster, a browser, and every test that uses `local_ray` below, so that the inner loop starts
no Ray. Every change still has to pass the whole suite (CI runs it). Each test is bounded by pyproject's `timeout`
(a hung test dumps every thread's stack and ends the run); a long end-to-end test sets its own with
`@pytest.mark.timeout(N)`. New tests stay fast: tiny models,
few steps, the session's `local_ray` and a module's `one_torch_thread` below; a long end-to-end one is
marked `@pytest.mark.slow`.
"""

import atexit
import os
import shutil
import tempfile

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Triton reads TRITON_INTERPRET when it is first imported, and other tests (torch.compile) may import it before
# tests/test_fused_attention.py runs: set it for the whole session, so that the fused kernels always run in
# Triton's interpreter here (no test runs them on a GPU; tests/benchmarks/gpu_check.sh does).
os.environ.setdefault("TRITON_INTERPRET", "1")
# The orchestrator's caches (the code's file hashes, the contract's passes: ~/.cache/dape-orchestrator) in a folder
# of this session's own, so that every run of the suite checks the contract from nothing, whatever ran before.
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="dape-tests-cache-")
atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], True)  # gone with the session


@pytest.fixture(scope="session")
def local_ray():
    """One local Ray for the whole session: starting Ray costs seconds, and studies reuse it."""
    import ray

    # address="local": always a fresh Ray, never a cluster some other process left running.
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread for a module's tests (`pytestmark = pytest.mark.usefixtures("one_torch_thread")`):
    tiny tensors on a shared 2-core machine, where two spinning threads per process are many times slower."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

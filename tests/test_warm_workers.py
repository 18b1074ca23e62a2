"""Warm workers: the private local Ray's workers import PyTorch and the trial's modules as they start
(orchestrator/execution/cluster.py, WARM_MODULES), and `dape_core.warm` names every module an experiment would
otherwise load in its first seconds."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# What made a cold trial's first seconds (about 4 s here): the optimizer's first param group loads torch._dynamo,
# which reaches sympy, triton and FSDP; the trainer, data and evaluation modules of dape_core.
HEAVY = ("dape_core", "sympy", "mpmath", "triton", "torch._dynamo", "torch.distributed.fsdp", "torch.onnx")


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                          timeout=240, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_after_dape_core_warm_an_experiment_imports_nothing_heavy():
    """A small experiment (2 steps, one length) in a process that imported dape_core.warm loads none of the
    modules that made a cold trial slow; without it, it loads them all (the check can fail)."""
    experiment = """
        import dataclasses, sys
        {warm}
        from dape_core import ExperimentConfig, run_experiment
        cfg = ExperimentConfig(model={{"preset": "tiny", "pos_encoding": "kerple", "processor": "dapev2", "d_dape": 8}},
                               data={{"max_files": 60}}, train={{"steps": 2, "batch_size": 4, "seq_len": 32}},
                               eval={{"lengths": [32], "n_windows": 4, "tail_tokens": 16}})
        before = set(sys.modules)
        run_experiment(cfg, threads=1)
        heavy = {heavy!r}
        print(sorted({{m for m in set(sys.modules) - before if m.startswith(heavy)}}))
    """
    warm = eval(_run(experiment.format(warm="import dape_core.warm", heavy=HEAVY)))
    cold = eval(_run(experiment.format(warm="", heavy=HEAVY)))
    assert warm == []
    assert {"sympy", "torch._dynamo", "dape_core.model", "dape_core.train.loop"} <= set(cold)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_private_local_rays_workers_start_with_the_trial_modules_loaded():
    """The local Ray that `orchestrator run` starts (cluster.connect without an address): an actor's process
    finds torch, dape_core.warm and the trainable imported before its first line runs."""
    loaded = _run("""
        import sys
        import ray
        from orchestrator.execution import cluster

        cluster.connect(None)
        names = list(cluster.WARM_MODULES) + ["torch"]

        @ray.remote(num_cpus=1)
        class Probe:
            def __init__(self):
                self.loaded = sorted(name for name in names if name in sys.modules)  # before anything else

            def modules(self):
                return self.loaded

        try:
            print(ray.get(Probe.remote().modules.remote(), timeout=120))
        finally:
            ray.shutdown()
    """)
    assert eval(loaded) == sorted(["dape_core.warm", "orchestrator.execution.tune_trial", "torch"])

"""Importing this module loads what a language-model experiment (`run_experiment`) loads on first use: PyTorch
with the compiler stack its optimizers load on first use (torch._dynamo, which reaches sympy, triton and FSDP),
and dape_core's model, trainer, data and evaluation modules. A process started ahead of
its work imports it to start its first experiment warm: the orchestrator names it in the modules its private
local Ray's workers preload (orchestrator/execution/cluster.py), so that a trial's first seconds are not
imports (about 4 s on the development machine). No state and no threads: imports only.
tests/test_warm_workers.py checks that a small experiment after it imports nothing more of dape_core, torch
or their heavy dependencies."""

import numpy.random  # noqa: F401  (the evaluation windows' generator)
import torch  # noqa: F401
import torch._dynamo  # noqa: F401  (the optimizer's first param group loads it: about 1.5 s, with sympy and triton)

from . import allocator, experiment, fused, model, stored  # noqa: F401
from .data import corpus, raw_inputs, sources, tokenization, windows  # noqa: F401
from .evaluate import flops, perplexity, timing  # noqa: F401
from .processors import score_conv  # noqa: F401
from .train import distributed, loop  # noqa: F401

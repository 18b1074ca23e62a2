"""The protocol sees what the papers see (docs/method.md §6), at a CPU scale: a RoPE model trained at length 32 is
clearly worse at 8x its training length and its ΔP is negative there, while Kerple degrades far less.

Scale: 2 layers, width 64, 2 heads, byte-level stdlib source, training length 32, batch 32, 600 steps
(~0.6M training tokens; ~20-50 s per model on 2 busy cores). Measured on seeds 0-3 at this scale: RoPE's
perplexity at 256 is 1.74-2.00x its value at 32 (ΔP(256) from -6.1 to -8.2), Kerple's 1.015-1.042x
(ΔP(256) from -0.12 to -0.37); at 1000 steps RoPE reaches 2.8-3.2x. The thresholds below leave margin.
"""

import pytest
import torch

from dape_core import ExperimentConfig, run_experiment

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # two models trained in the first test

LENGTHS = [32, 64, 128, 256]


def _train(pos_encoding: str):
    cfg = ExperimentConfig(
        model={"preset": "tiny", "pos_encoding": pos_encoding},
        train={"steps": 600, "batch_size": 32, "seq_len": 32, "lr": 1e-3, "seed": 0, "log_every": 100},
        eval={"lengths": LENGTHS, "tail_tokens": 32, "tokens_per_length": 2048},
    )
    threads = torch.get_num_threads()
    try:
        return run_experiment(cfg, threads=1)
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def results():
    out = {name: _train(name) for name in ("rope", "kerple")}
    for name, result in out.items():  # shown with `pytest -s`: the figures behind the assertions
        cells = "  ".join(f"L={L}: {result.perplexity[L]:.3f} (ΔP {result.delta_p[L]:+.3f})" for L in LENGTHS)
        print(f"\n{name}: {cells}  ms/step {result.ms_per_step:.1f}")
    return out


def test_rope_fails_beyond_its_training_length(results):
    rope = results["rope"]
    assert rope.perplexity[256] > 1.5 * rope.perplexity[32]
    assert rope.delta_p[256] < -2.0  # extra context hurts: reading only the last 32 tokens is better
    assert rope.delta_p[64] < 0


def test_kerple_degrades_far_less(results):
    rope, kerple = results["rope"], results["kerple"]
    assert kerple.perplexity[256] < 1.1 * kerple.perplexity[32]
    assert kerple.delta_p[256] > rope.delta_p[256] / 5
    assert kerple.perplexity[256] / kerple.perplexity[32] < rope.perplexity[256] / rope.perplexity[32] - 0.5

"""The evaluation protocol (docs/method.md §6): tail-only scoring, ΔP, FLOPs, time cost, the attention heat maps and
the one structured result per trial."""

import dataclasses
import math

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from dape_core import ExperimentConfig, build_model, run_experiment
from dape_core.config import ModelConfig
from dape_core.data import DataConfig, evaluation_windows, load_corpus
from dape_core.evaluate import (
    EvalConfig,
    attention_rows,
    delta_p,
    forward_flops_per_token,
    forward_ms_by_length,
    forward_ms_from_evaluation,
    measured_forward_flops,
    perplexity_by_length,
    save_heat_maps,
    tail_loss,
)

TINY = {"preset": "tiny", "d_dape": 8}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def windows():
    corpus = load_corpus(DataConfig(max_files=150))
    return evaluation_windows(corpus.validation, [32, 64, 128], n_windows=6, seed=0)


def _model_fields() -> set[str]:
    return {f.name for f in dataclasses.fields(ModelConfig)}


def _model(**overrides):
    torch.manual_seed(0)
    return build_model(ModelConfig(**{**TINY, **overrides})).eval()


def test_only_the_last_k_tokens_are_scored(windows):
    model = _model(pos_encoding="kerple", processor="dapev2")
    rows = windows[64]
    with torch.no_grad():
        logits = model(rows[:, :-1])
    for tail in (1, 16, 64):
        expected = F.cross_entropy(logits[:, -tail:].flatten(0, 1), rows[:, -tail:].flatten()).item()
        assert tail_loss(model, rows, tail, batch_size=4) == pytest.approx(expected, rel=1e-5)
    # A scored target counts.
    changed = rows.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 256
    assert tail_loss(model, changed, 16, 4) != pytest.approx(tail_loss(model, rows, 16, 4), rel=1e-6)


def test_delta_p_compares_the_training_length_tail_with_the_full_window(windows):
    model = _model(pos_encoding="rope")
    cfg = EvalConfig(lengths=[32, 64, 128], tail_tokens=16, n_windows=6)
    ppl = perplexity_by_length(model, windows, cfg)
    gains = delta_p(ppl, train_length=32)
    for length in (64, 128):
        # P(model on the last T_train tokens only): the same scored tokens, context cut to T_train.
        short = math.exp(tail_loss(model, windows[length][:, -33:], 16, 8))
        assert gains[length] == pytest.approx(short - ppl[length], rel=1e-5)
    assert gains[32] == 0.0
    with pytest.raises(ValueError, match="training length 16"):
        delta_p(ppl, train_length=16)


@pytest.mark.parametrize("overrides", [
    {"pos_encoding": "kerple", "processor": "none"},
    {"pos_encoding": "kerple", "processor": "dapev2", "kernel_size": 3},
    {"pos_encoding": "alibi", "processor": "dape", "form": "add_residual"},
    {"pos_encoding": "rope", "processor": "dapev2", "kernel_size": 5},
], ids=lambda o: "-".join(str(v) for v in o.values()))
def test_analytic_flops_match_pytorchs_count(overrides):
    model = _model(**overrides)
    tokens = torch.randint(0, 256, (2, 48))
    assert forward_flops_per_token(model, 48) == measured_forward_flops(model, tokens)


def test_processor_flops_follow_spec_formula():
    """docs/method.md §4: a DAPE V2 processor adds 3·H·D·k·T² multiply-adds per layer and sequence over a bias PE."""
    T, k = 64, 3
    base = forward_flops_per_token(_model(pos_encoding="kerple"), T)
    dape = forward_flops_per_token(_model(pos_encoding="kerple", processor="dapev2", kernel_size=k), T)
    H, D, layers = 2, TINY["d_dape"], 2
    assert dape - base == 2 * layers * 3 * H * D * k * T


def _kernels():
    kernels = [3]
    try:  # 2-D kernels (kq x kk) exist in dape_cores with the attention paths
        ModelConfig(**TINY, processor="dapev2", kernel_size=(2, 3))
        kernels.append((2, 3))
    except ValueError:
        pass
    return kernels


@pytest.mark.parametrize("kernel", _kernels(), ids=str)
def test_attention_row_is_what_the_model_computes(windows, tmp_path, kernel):
    # The direct path, so that the processor's hook below sees the whole [T, T] map in one call.
    direct = {"eval_block_size": None} if "eval_block_size" in _model_fields() else {}
    model = _model(pos_encoding="kerple", processor="dapev2", kernel_size=kernel, **direct)
    tokens = windows[128][:1, :-1]
    full_logits, full_bias = [], []

    def capture(module, args, output):  # the processor's own [H, T, T] output in a normal forward
        full_logits.append(output[0].detach())
        full_bias.append(args[1].detach())

    hooks = [block.attn.processor.register_forward_hook(capture) for block in model.blocks]
    with torch.no_grad():
        model(tokens)
    for hook in hooks:
        hook.remove()
    rows = attention_rows(model, tokens)
    assert len(rows) == len(model.blocks)
    for layer, row in enumerate(rows):
        assert row["query"] == 127 and row["logits"].shape == (2, 128) and row["bias"].shape == (2, 128)
        np.testing.assert_allclose(row["logits"], full_logits[layer][:, -1].numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(row["bias"], full_bias[layer][:, -1].numpy(), rtol=1e-6, atol=1e-6)
    earlier = attention_rows(model, tokens, query=40)[0]
    assert np.isnan(earlier["logits"][:, 41:]).all() and not np.isnan(earlier["logits"][:, :41]).any()

    paths = save_heat_maps(rows, tmp_path, title="kerple / dapev2")
    pngs = [p for p in paths if p.suffix == ".png"]
    assert len(pngs) == 2 and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    arrays = np.load(next(p for p in paths if p.suffix == ".npz"))
    assert arrays["layer1_bias"].shape == (2, 128)


@pytest.mark.parametrize("kernel", [1, 3, (3, 3)])
def test_attention_maps_are_the_models_query_by_key_logits(windows, tmp_path, kernel):
    """The papers' figure: per layer and head, every query against every key, equal to the processor's own
    [H, T, T] output in a normal forward (keys after the query: NaN); pooled by block means past 256."""
    from dape_core.evaluate import attention_maps, save_attention_maps

    direct = {"eval_block_size": None} if "eval_block_size" in _model_fields() else {}
    model = _model(pos_encoding="kerple", processor="dapev2", kernel_size=kernel, **direct)
    tokens = windows[128][:1, :-1]
    full = []
    hooks = [block.attn.processor.register_forward_hook(lambda m, a, out: full.append(out[0].detach()))
             for block in model.blocks]
    with torch.no_grad():
        model(tokens)
    for hook in hooks:
        hook.remove()
    maps = attention_maps(model, tokens)
    assert len(maps) == len(model.blocks)
    upper = np.triu(np.ones((128, 128), dtype=bool), k=1)
    for layer, values in enumerate(maps):
        assert values.shape == (2, 128, 128) and np.isnan(values[:, upper]).all()
        np.testing.assert_allclose(values[:, ~upper], full[layer].numpy()[:, ~upper], rtol=1e-5, atol=1e-5)
    pooled = attention_maps(model, tokens, pixels=32)[0]  # 4 x 4 blocks: their means, the upper ones NaN
    block = maps[0][:, 4:8, 0:4]
    assert pooled.shape == (2, 32, 32) and np.isnan(pooled[:, 0, 1]).all()
    np.testing.assert_allclose(pooled[:, 1, 0], block.reshape(2, -1).mean(axis=1), rtol=1e-5)
    paths = save_attention_maps(maps, tmp_path, "kerple + dapev2, kernel 1×3; trained at L=32, evaluated at L=128", 128)
    assert [p.name for p in paths] == ["attention_layer0.png", "attention_layer1.png", "attention_maps.npz"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in paths[:2])
    assert np.load(paths[-1])["layer1_logits"].shape == (2, 128, 128)


def test_the_visualised_window_is_the_start_of_the_held_out_text():
    from dape_core.evaluate import visualise_window
    from dape_core.experiment import visualise_title

    parts = [np.arange(5), np.arange(100, 110)]
    assert visualise_window(parts, 8).tolist() == [[0, 1, 2, 3, 4, 100, 101, 102]]
    with pytest.raises(ValueError, match="15 tokens, fewer than the 16"):
        visualise_window(parts, 16)
    cfg = ExperimentConfig(model={**TINY, "pos_encoding": "kerple", "processor": "dapev2", "kernel_size": 3},
                           train={"seq_len": 64})
    assert visualise_title(cfg, 1024) == "Kerple + DAPE V2, kernel 1×3; trained at L=64, evaluated at L=1024"


def test_heat_maps_of_an_encoding_without_bias_show_the_logits(windows, tmp_path):
    model = _model(pos_encoding="rope")
    rows = attention_rows(model, windows[64][:1, :-1])
    assert rows[0]["bias"] is None and rows[0]["logits"].shape == (2, 64)
    assert len(save_heat_maps(rows, tmp_path)) == 3


def test_forward_timing_is_a_median_per_length(windows):
    model = _model(pos_encoding="kerple")
    timing = forward_ms_by_length(model, windows, batch_size=2, warmup=1, reps=3)
    assert sorted(timing) == [32, 64, 128] and all(0 < ms < 10_000 for ms in timing.values())

    # Timing taken from the evaluation's own batches: warm-up dropped, median of the rest, extra passes
    # only when too few batches remain.
    cfg = EvalConfig(lengths=[32, 64], tail_tokens=16, batch_size=2, timing_warmup=1, timing_reps=3)
    batch_ms: dict[int, list[float]] = {}
    perplexity_by_length(model, {32: windows[32], 64: windows[64]}, cfg, batch_ms=batch_ms)
    assert {length: len(samples) for length, samples in batch_ms.items()} == {32: 3, 64: 3}  # 6 windows / 2
    recorded = {32: [500.0, 1.0, 2.0, 3.0], 64: [500.0, 7.0]}
    timing = forward_ms_from_evaluation(model, {32: windows[32], 64: windows[64]}, recorded, cfg)
    assert timing[32] == 2.0  # no extra pass: exactly the median of the recorded batches after warm-up
    assert 0 < timing[64] < 500.0


def test_block_path_does_not_change_perplexity(windows):
    """The memory-efficient block path used automatically at long evaluation lengths gives the direct path's
    perplexity."""
    cfg = EvalConfig(lengths=[32, 64, 128], tail_tokens=16, n_windows=6)
    for overrides in ({"pos_encoding": "kerple", "processor": "dapev2"}, {"pos_encoding": "alibi"}):
        direct = _model(**overrides, eval_block_size=None)
        blocked = _model(**overrides, eval_block_size=16)
        blocked.load_state_dict(direct.state_dict())
        exact, block = perplexity_by_length(direct, windows, cfg), perplexity_by_length(blocked, windows, cfg)
        for length in exact:
            assert block[length] == pytest.approx(exact[length], rel=1e-4), (overrides, length)


def test_one_structured_result_per_trial(tmp_path):
    cfg = ExperimentConfig(
        model={**TINY, "pos_encoding": "kerple", "processor": "dapev2"}, data={"max_files": 150},
        train={"steps": 12, "batch_size": 4, "seq_len": 32, "log_every": 4},
        eval={"lengths": [64, 128], "tail_tokens": 16, "tokens_per_length": 64, "visualise": True,
              "timing_reps": 2})
    result = run_experiment(cfg, threads=1, artifacts_dir=tmp_path)
    metrics = result.metrics()
    expected = {"ppl_64", "ppl_128", "delta_p_64", "delta_p_128", "ms_forward_64", "ms_forward_128", "ms_per_step",
                "flops_per_token", "peak_memory_mb", "train_loss", "num_parameters", "tokens_seen"}
    assert expected <= metrics.keys() and all(math.isfinite(v) for v in metrics.values())
    assert "ppl_32" not in metrics  # ΔP's training-length reference is not an evaluation length here
    assert result.device == "cpu" and result.precision == "fp32" and result.peak_memory_bytes > 0
    assert result.flops_per_token == forward_flops_per_token(build_model(ModelConfig(**cfg.model.to_dict())), 32)
    assert sorted(p.rsplit("/", 1)[-1] for p in result.artifacts) == [
        "attention_layer0.png", "attention_layer1.png", "attention_maps.npz"]
    assert result.data_record["tokens"]["validation"] > 0 and result.data_record["split_seed"] == 0

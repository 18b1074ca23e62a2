"""The score processor's GEMM path (dape_core/processors/score_conv.py) computes the same function as PyTorch's
convolutions: float64 equality of the logits and of every gradient over kernels, forms, leak, a bidirectional
model and the block path's row ranges; float32 within rounding, where the summation order differs."""

from __future__ import annotations

import pytest
import torch

from dape_core import ModelConfig
from dape_core.processors import score_conv
from dape_core.processors.base import build_processor

CASES = [  # (rows offset, rows, keys): a whole map, a block of rows as attention.attend_rows gives, long maps
    (0, 9, 9), (3, 5, 8), (0, 2, 1), (0, 40, 40), (20, 17, 40)]


def _processor(kernel, form, has_bias, leak, causal, d_dape):
    """DAPE V2 as a model builds it: 4 heads (preset small), Kerple's bias or none (NoPE)."""
    cfg = ModelConfig(preset="small", pos_encoding="kerple" if has_bias else "nope", processor="dapev2",
                      kernel_size=kernel, form=form if has_bias else "concat_residual", leak=leak, causal=causal,
                      d_dape=d_dape)
    return build_processor(cfg, has_bias)


def _run(proc, scores, bias, q_pos, k_pos, grad, gemm: bool) -> list[torch.Tensor]:
    proc.zero_grad()
    scores.grad = None
    if bias is not None:
        bias.grad = None
    if gemm:
        out = proc(scores, bias, q_pos, k_pos)
    else:
        with score_conv.convolutions():
            out = proc(scores, bias, q_pos, k_pos)
    out.backward(grad)
    grads = [scores.grad] + ([bias.grad] if bias is not None else []) + [p.grad for p in proc.parameters()]
    return [out.detach().clone()] + [g.clone() for g in grads]


def _inputs(heads, has_bias, offset, rows, keys, dtype, seed=0):
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(3, heads, rows, keys, generator=generator, dtype=dtype).requires_grad_()
    bias = torch.randn(heads, rows, keys, generator=generator, dtype=dtype).requires_grad_() if has_bias else None
    grad = torch.randn(3, heads, rows, keys, generator=generator, dtype=dtype)
    return scores, bias, torch.arange(offset, offset + rows), torch.arange(keys), grad


@pytest.mark.parametrize("kernel,form,has_bias,leak,causal", [
    (1, "concat_residual", True, False, True), (3, "concat_residual", True, False, True),
    (7, "concat_residual", True, False, True), (3, "concat_residual", True, True, True),
    (3, "concat_residual", True, False, False), ((2, 3), "concat_residual", True, False, True),
    ((3, 1), "concat_residual", True, True, True), (5, "add_residual", True, False, True),
    (3, "bias_only", True, False, True), (3, "concat", True, False, True), (3, "no_bias", False, False, True),
    ((2, 3), "no_bias", False, False, False)])
def test_gemm_path_equals_the_convolutions_in_float64(kernel, form, has_bias, leak, causal):
    torch.manual_seed(0)
    proc = _processor(kernel, form, has_bias, leak, causal, 6).double()
    with torch.no_grad():  # biases of both signs, so that LeakyReLU(b_in)'s two slopes are exercised
        proc.conv_in.bias.copy_(torch.linspace(-0.5, 0.5, 6, dtype=torch.float64))
    for offset, rows, keys in CASES:
        scores, bias, q_pos, k_pos, grad = _inputs(4, has_bias, offset, rows, keys, torch.float64)
        reference = _run(proc, scores, bias, q_pos, k_pos, grad, gemm=False)
        ours = _run(proc, scores, bias, q_pos, k_pos, grad, gemm=True)
        with torch.no_grad():  # evaluation: nothing kept for a backward, the same values
            assert torch.equal(proc(scores, bias, q_pos, k_pos), ours[0])
        for index, (a, b) in enumerate(zip(ours, reference)):
            assert a.shape == b.shape
            error = ((a - b).abs().max() / (1 + b.abs().max())).item()
            assert error < 1e-13, (offset, rows, keys, index, error)


def test_causal_blocks_skip_the_far_keys_and_keep_them_exact():
    """A causal 1x3 map of 64 rows is computed in row blocks that stop short of the last keys (what makes it
    faster), and the skipped part (one value per head and key) still equals the convolutions' output."""
    keep = (torch.arange(64)[None, :] <= torch.arange(64)[:, None]).float()
    blocks = score_conv._blocks(keep, (1, 3), 64, 64)
    assert len(blocks) > 1 and blocks[0].exact < 64 and blocks[-1].exact == 64
    assert score_conv._blocks(None, (1, 3), 64, 64) == [score_conv.Block(0, 64, 64, 64)]  # leak: every key
    test_gemm_path_equals_the_convolutions_in_float64(3, "concat_residual", True, False, True)


def test_float32_within_rounding_of_the_convolutions():
    """float32: the same function summed in another order (GEMMs against oneDNN's convolution), so equal
    within float32 rounding, not bit for bit (docs/method.md §4.5)."""
    torch.manual_seed(0)
    proc = _processor(3, "concat_residual", True, False, True, 32)
    scores, bias, q_pos, k_pos, grad = _inputs(4, True, 0, 64, 64, torch.float32)
    reference = _run(proc, scores, bias, q_pos, k_pos, grad, gemm=False)
    ours = _run(proc, scores, bias, q_pos, k_pos, grad, gemm=True)
    for a, b in zip(ours, reference):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4 * b.abs().max().item())


def test_autocast_and_the_reference_keep_pytorch_convolutions():
    scores = torch.zeros(1, 4, 2, 2)
    assert score_conv.applies(scores)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not score_conv.applies(scores)
    with score_conv.convolutions():
        assert not score_conv.applies(scores)
    assert score_conv.applies(scores)


@pytest.mark.parametrize("kernel", [3, 7])
def test_evaluation_blocks_within_the_byte_budget_give_the_same_values_bit_for_bit(monkeypatch, kernel):
    """Without gradients the processor's row blocks are cut to BLOCK_BYTES (issue 45: a 1x7 map of 8 windows at
    L=1024 had a 60 MB im2col matrix per block, mapped and faulted in anew each time); the model's evaluation
    logits must be those of the uncut blocks, bit for bit, at an evaluation's shapes (8 windows of 512 tokens,
    where the budget cuts the blocks of the longer rows from 32 rows to 16 (1x3) and 8 (1x7))."""
    from dape_core.model import build_model

    torch.manual_seed(0)
    cfg = ModelConfig(preset="small", n_layer=2, pos_encoding="kerple", processor="dapev2", kernel_size=kernel,
                      d_dape=32, train_length=64)
    model = build_model(cfg).eval()
    windows = torch.randint(0, cfg.vocab_size, (8, 512), generator=torch.Generator().manual_seed(1))
    seen: list[int] = []
    blocks = score_conv._blocks

    def counted(*args):
        found = blocks(*args)
        seen.append(max(block.stop - block.start for block in found))
        return found

    monkeypatch.setattr(score_conv, "_blocks", counted)
    with torch.no_grad():
        cut = model(windows)[0]
        cut_rows = min(seen)
        seen.clear()
        monkeypatch.setattr(score_conv, "BLOCK_BYTES", 1 << 40)
        whole = model(windows)[0]
    assert cut_rows == {3: 16, 7: 8}[kernel] < min(seen) == 32  # the budget cut the blocks; without it 4 of 32 rows
    assert torch.equal(cut, whole)

"""The block path (query rows in blocks, keys up to the block's last row plus a halo) computes exactly what
the direct path and an independent re-implementation of the reference formulation compute."""

import math

import pytest
import torch
from torch.nn import functional as F

from dape_core import ModelConfig, build_model
from dape_core.attention import CausalSelfAttention
from dape_core.encodings.base import build_position_encoding

TOL = 1e-4  # the bound for float32, on logits and on every gradient

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny tensors: see tests/conftest.py


PROCESSORS = [
    {"processor": "none"},
    {"processor": "dape"},
    {"processor": "dapev2", "kernel_size": 3},
    {"processor": "dapev2", "kernel_size": 5},
    {"processor": "dapev2", "kernel_size": (2, 3)},
    {"processor": "dapev2", "kernel_size": (3, 1)},
    {"processor": "dapev2", "kernel_size": 3, "leak": True},
    {"processor": "dapev2", "kernel_size": 3, "form": "concat"},
    {"processor": "dapev2", "kernel_size": 3, "form": "add_residual"},
    {"processor": "dapev2", "kernel_size": 3, "form": "bias_only"},
]


def _id(params: dict) -> str:
    return "-".join(f"{value}" for value in params.values())


def _twin_models(block: int, **overrides):
    """The same weights twice: one on the direct path only, one on the block path for training and evaluation."""
    base = dict(preset="tiny", n_layer=2, d_dape=8, train_length=16, **overrides)
    torch.manual_seed(0)
    direct = build_model(ModelConfig(**base, attention_block_size=None, eval_block_size=None))
    blocked = build_model(ModelConfig(**base, attention_block_size=block, eval_block_size=block))
    blocked.load_state_dict(direct.state_dict())
    return direct, blocked


def _logits_and_grads(model, tokens):
    model.train()
    model.zero_grad()
    logits, loss = model(tokens, tokens.roll(-1, dims=1))
    loss.backward()
    return logits.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("params", PROCESSORS, ids=_id)
@pytest.mark.parametrize("length,block", [(21, 4), (32, 8), (37, 16)])
def test_block_path_matches_direct_path(params, length, block):
    direct, blocked = _twin_models(block, pos_encoding="kerple", **params)
    tokens = torch.randint(0, 256, (2, length), generator=torch.Generator().manual_seed(length))
    logits_d, grads_d = _logits_and_grads(direct, tokens)
    logits_b, grads_b = _logits_and_grads(blocked, tokens)
    assert (logits_d - logits_b).abs().max() <= TOL
    assert grads_d.keys() == grads_b.keys() and len(grads_d) > 0
    for name in grads_d:
        assert (grads_d[name] - grads_b[name]).abs().max() <= TOL, name
    with torch.no_grad():
        eval_d, eval_b = direct.eval()(tokens), blocked.eval()(tokens)
    assert (eval_d - eval_b).abs().max() <= TOL


@pytest.mark.parametrize("encoding", ["nope", "rope", "alibi", "fire", "t5", "kerple_power"])
def test_block_path_matches_direct_path_for_other_encodings(encoding):
    direct, blocked = _twin_models(8, pos_encoding=encoding, processor="dapev2", kernel_size=3)
    tokens = torch.randint(0, 256, (2, 30))
    logits_d, grads_d = _logits_and_grads(direct, tokens)
    logits_b, grads_b = _logits_and_grads(blocked, tokens)
    assert (logits_d - logits_b).abs().max() <= TOL
    assert max((grads_d[name] - grads_b[name]).abs().max() for name in grads_d) <= TOL


def _layer(**overrides) -> CausalSelfAttention:
    cfg = ModelConfig(preset="tiny", n_head=4, d_model=64, d_dape=8, pos_encoding="kerple", **overrides)
    torch.manual_seed(1)
    return CausalSelfAttention(cfg, build_position_encoding(cfg))


def _reference_attention(layer: CausalSelfAttention, q, k, v):
    """The reference formulation written out: concat over heads, tril, two Conv2d over the full T x T map
    (query axis padded on the past side for taller kernels), S + B + f, causal mask, softmax, ·V."""
    proc = layer.processor
    length = q.shape[2]
    positions = torch.arange(length)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    bias = layer.pos.bias(positions, positions).expand_as(scores)
    z = torch.cat([scores, bias], dim=1)
    if not proc.leak:
        z = torch.tril(z)
    rows, cols = proc.kernel
    hidden = F.conv2d(F.pad(z, (cols // 2, cols // 2, rows - 1, 0)), proc.conv_in.weight, proc.conv_in.bias)
    hidden = F.leaky_relu(hidden, 0.01)
    f = F.conv2d(F.pad(hidden, (cols // 2, cols // 2, rows - 1, 0)), proc.conv_out.weight, proc.conv_out.bias)
    logits = scores + bias + f
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    return logits.masked_fill(~causal, float("-inf")).softmax(-1) @ v


@pytest.mark.parametrize("kernel", [1, 3, 5, (2, 3), (3, 5)])
@pytest.mark.parametrize("leak", [False, True])
def test_both_paths_match_the_reference_formulation(kernel, leak):
    layer = _layer(processor="dapev2", kernel_size=kernel, leak=leak).eval()
    q, k, v = (torch.randn(2, 4, 40, 16, generator=torch.Generator().manual_seed(i)) for i in range(3))
    positions = torch.arange(40)
    with torch.no_grad():
        layer.pos.p.mul_(3)  # larger biases than the init makes the comparison more telling
        expected = _reference_attention(layer, q, k, v)
        direct = layer.attend_rows(q, k, v, positions, 0, 40)
        blocked = layer.attend_blocks(q, k, v, positions, rows=7)
    assert (direct - expected).abs().max() <= TOL
    assert (blocked - expected).abs().max() <= TOL


@pytest.mark.parametrize("kernel", [3, 5])
def test_block_without_the_key_halo_is_wrong(kernel):
    """The halo is needed: without it the first conv's non-zero output just above the diagonal is lost."""
    layer = _layer(processor="dapev2", kernel_size=kernel).eval()
    q, k, v = (torch.randn(1, 4, 32, 16, generator=torch.Generator().manual_seed(i)) for i in range(3))
    positions = torch.arange(32)
    with torch.no_grad():
        direct = layer.attend_rows(q, k, v, positions, 0, 32)
        layer.processor.key_halo = 0
        no_halo = layer.attend_blocks(q, k, v, positions, rows=8)
    assert (direct - no_halo).abs().max() > 1e-3


def test_two_dimensional_block_without_the_row_halo_is_wrong():
    layer = _layer(processor="dapev2", kernel_size=(3, 3)).eval()
    q, k, v = (torch.randn(1, 4, 32, 16, generator=torch.Generator().manual_seed(i)) for i in range(3))
    positions = torch.arange(32)
    with torch.no_grad():
        direct = layer.attend_rows(q, k, v, positions, 0, 32)
        layer.processor.row_halo = 0
        no_halo = layer.attend_blocks(q, k, v, positions, rows=8)
    assert (direct - no_halo).abs().max() > 1e-3


def test_long_evaluation_switches_to_blocks_automatically(monkeypatch):
    model = build_model(ModelConfig(preset="tiny", processor="dapev2", kernel_size=3, d_dape=8,
                                    eval_block_size=16)).eval()
    calls = []
    layer = model.blocks[0].attn
    original = layer.attend_rows
    monkeypatch.setattr(layer, "attend_rows", lambda *args: calls.append(args[-2:]) or original(*args))
    with torch.no_grad():
        model(torch.randint(0, 256, (1, 16)))
        assert calls == [(0, 16)]  # T <= eval_block_size: the direct path
        calls.clear()
        model(torch.randint(0, 256, (1, 40)))
    assert calls == [(0, 16), (16, 32), (32, 40)]


def test_training_uses_the_direct_path_unless_a_block_size_is_set():
    layer = _layer(processor="dapev2").train()
    assert layer.block_rows(batch=4, length=4096) is None
    layer.train_block_rows = 64
    assert layer.block_rows(batch=4, length=4096) == 64
    with torch.no_grad():  # evaluation: bounded by the per-block element budget
        assert layer.block_rows(batch=64, length=8192) == 16


def test_cuda_training_blocks_take_their_rows_from_the_memory_budget(monkeypatch):
    """On CUDA the rows per training block come from CUDA_BLOCK_BYTES (as many as fit, evened out over the
    blocks, a multiple of 16), not from attention_block_size; on CPU they stay attention_block_size."""
    from dape_core import attention

    layer = _layer(processor="dapev2", kernel_size=3).train()
    layer.train_block_rows = 64
    assert layer.block_rows(batch=4, length=4096) == 64
    conv = layer.processor.conv_in
    per_entry = 2 * (2 * (conv.in_channels + conv.out_channels) + 4 * 4) + 4 * 4  # bf16, 4 heads
    for budget in (2**26, 2**28, 2**30):
        monkeypatch.setattr(attention, "CUDA_BLOCK_BYTES", budget)
        rows = layer.block_rows(batch=4, length=4096, cuda=True, element_size=2)
        blocks = math.ceil(4096 / rows)
        assert rows % 16 == 0 and rows * per_entry * 4 * 4096 <= budget
        fitting = budget // (per_entry * 4 * 4096) // 16 * 16  # the most rows within budget, a multiple of 16
        assert blocks == math.ceil(4096 / fitting)  # no more blocks than the budget needs
    monkeypatch.setattr(attention, "CUDA_BLOCK_BYTES", 2**40)
    assert layer.block_rows(batch=4, length=4096, cuda=True, element_size=2) == 4096  # all fits: one block


@pytest.mark.parametrize("params", [{"kernel_size": 3}, {"kernel_size": 3, "leak": True}, {"kernel_size": (2, 3)},
                                    {"kernel_size": 5, "causal": False}], ids=_id)
def test_uniform_blocks_match_the_direct_path(params):
    """Blocks of one shape (all keys, the last block overlapping the one before) give the direct path's
    output and gradients."""
    layer = _layer(processor="dapev2", **params).double().train()
    q, k, v = (torch.randn(2, 4, 40, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(i))
               .requires_grad_() for i in range(3))
    positions = torch.arange(40)
    results = []
    for attend in (lambda: layer.attend_rows(q, k, v, positions, 0, 40),
                   lambda: layer.attend_blocks(q, k, v, positions, rows=16, uniform=True)):
        out = attend()
        results.append([out, *torch.autograd.grad(out.square().sum(), [q, k, v, *layer.processor.parameters()])])
    for direct, blocked in zip(*results):
        assert (direct - blocked).abs().max() <= 1e-12


@pytest.mark.parametrize("encoding", ["kerple", "alibi"])  # a learned bias, and a fixed one
@pytest.mark.parametrize("rows", [(0, 24), (8, 24)])  # every row, and a block of rows over its keys
def test_a_bias_per_head_attends_through_pytorchs_math_path_bit_for_bit(encoding, rows):
    """A bias per head ([H, rows, keys]) is a mask PyTorch's CPU kernel does not take: its
    `scaled_dot_product_attention` computes it on its math path, and so does `math_attention` (issue 45), which
    must give the same output and every gradient, bit for bit, in training and in evaluation: the same trained
    model and the same perplexities as before it. Under autocast PyTorch computes it."""
    from dape_core import attention as attention_module

    torch.manual_seed(0)
    cfg = ModelConfig(preset="tiny", n_layer=1, pos_encoding=encoding, train_length=24)
    layer = build_model(cfg).blocks[0].attn.train()
    start, stop = rows
    batch, heads, length = 3, cfg.n_head, 24
    q, k, v = (torch.randn(batch, heads, length, cfg.head_dim, requires_grad=True) for _ in range(3))
    positions = torch.arange(length)
    grad = torch.randn(batch, heads, stop - start, cfg.head_dim)
    future = positions[None, :stop] > positions[start:stop, None]
    taken = []
    real = attention_module.math_attention

    def counted(*args):
        taken.append(torch.is_grad_enabled())
        return real(*args)

    def pytorchs():
        mask = layer.pos.bias(positions[start:stop], positions[:stop]).masked_fill(future, float("-inf"))
        assert torch._fused_sdp_choice(q[:, :, start:stop], k[:, :, :stop], v[:, :, :stop], mask, 0.0, False) == 0
        return F.scaled_dot_product_attention(q[:, :, start:stop], k[:, :, :stop], v[:, :, :stop], attn_mask=mask)

    results = []
    for path in ("ours", "pytorch"):
        for tensor in (q, k, v, *layer.parameters()):
            tensor.grad = None
        attention_module.math_attention = counted
        try:
            out = layer.attend_rows(q, k, v, positions, start, stop) if path == "ours" else pytorchs()
            with torch.no_grad():
                evaluated = layer.attend_rows(q, k, v, positions, start, stop) if path == "ours" else pytorchs()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                layer.attend_rows(q, k, v, positions, start, stop)
        finally:
            attention_module.math_attention = real
        out.backward(grad)
        learned = [t.grad.clone() for t in layer.pos.parameters()]
        results.append([out.detach(), evaluated, *(t.grad.clone() for t in (q, k, v)), *learned])
    assert taken == [True, False]  # ours: in training and in evaluation, not under autocast
    assert (len(results[0]) > 5) == (encoding == "kerple")  # Kerple's learned parameters got gradients too
    for ours, pytorch in zip(*results):
        assert torch.equal(ours, pytorch)

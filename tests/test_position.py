"""Position encodings: the formulas of docs/method.md §2 and its Decisions (§10)."""

import math

import pytest
import torch

from dape_core import ModelConfig, build_model
from dape_core.config import POS_ENCODINGS
from dape_core.encodings.alibi_torch import alibi_slopes
from dape_core.encodings.base import build_position_encoding, build_position_encodings
from dape_core.encodings.fire_torch import FIRE
from dape_core.encodings.kerple_torch import KerpleLog, KerplePower
from dape_core.encodings.rope_torch import RandomizedRoPE, RoPE, YaRN
from dape_core.encodings.t5 import T5_BUCKETS, T5_MAX_DISTANCE
from dape_core.encodings.t5_torch import T5Bias, t5_causal_bucket


def _positions(n: int) -> torch.Tensor:
    return torch.arange(n)


@pytest.mark.parametrize("heads", [12, 16, 32])
def test_alibi_slopes_match_formula(heads):
    slopes = alibi_slopes(heads)
    if heads in (16, 32):
        expected = [2 ** (-8 * (k + 1) / heads) for k in range(heads)]
    else:  # 12 heads: the 8 slopes of H=8, then every other slope of H=16
        expected = [2 ** (-(k + 1)) for k in range(8)] + [2 ** (-8 * (k + 1) / 16) for k in range(16)][0::2][:4]
    torch.testing.assert_close(slopes, torch.tensor(expected))


def test_alibi_bias_is_minus_slope_times_distance():
    enc = build_position_encoding(ModelConfig(preset="tiny", n_head=4, d_model=64, pos_encoding="alibi"))
    bias = enc.bias(_positions(6), _positions(6))
    assert bias.shape == (4, 6, 6)
    assert bias[2, 5, 1].item() == pytest.approx(-alibi_slopes(4)[2].item() * 4)
    assert not any(p.requires_grad for p in enc.parameters())


@pytest.mark.parametrize("cls", [KerpleLog, KerplePower])
def test_kerple_parameters_stay_clamped(cls):
    enc = cls(4)
    with torch.no_grad():
        enc.p.copy_(torch.tensor([-1.0, 0.0, 0.5, 5.0]))
        enc.a.copy_(torch.tensor([-3.0, 0.001, 0.5, 2.0]))
    enc.bias(_positions(8), _positions(8))
    p_max = 2.0 if cls is KerplePower else 5.0
    torch.testing.assert_close(enc.p.detach(), torch.tensor([0.01, 0.01, 0.5, p_max]))
    torch.testing.assert_close(enc.a.detach(), torch.tensor([0.01, 0.01, 0.5, 2.0]))
    # An optimizer pushing them below the bound: the next forward clamps them back, gradients stay finite.
    optimizer = torch.optim.SGD(enc.parameters(), lr=100.0)
    for _ in range(3):
        bias = enc.bias(_positions(8), _positions(8))
        assert (enc.p >= 0.01).all() and (enc.a >= 0.01).all() and (enc.p <= p_max).all()
        optimizer.zero_grad()
        (-bias).sum().backward()  # gradient descent pushes p and a down
        assert all(torch.isfinite(param.grad).all() for param in enc.parameters())
        optimizer.step()
    enc.bias(_positions(8), _positions(8))
    assert (enc.p >= 0.01).all() and (enc.a >= 0.01).all()


def test_kerple_formulas():
    log, power = KerpleLog(2), KerplePower(2)
    for enc in (log, power):
        with torch.no_grad():
            enc.p.copy_(torch.tensor([1.5, 0.7]))
            enc.a.copy_(torch.tensor([0.3, 2.0]))
    positions = _positions(10)
    assert log.bias(positions, positions)[1, 9, 2].item() == pytest.approx(-0.7 * math.log(1 + 2.0 * 7), rel=1e-6)
    assert power.bias(positions, positions)[0, 9, 2].item() == pytest.approx(-0.3 * 7**1.5, rel=1e-6)
    assert power.bias(positions, positions)[0, 4, 4].item() == 0.0


def test_fire_formula_and_threshold_default():
    cfg = ModelConfig(preset="tiny", n_head=2, d_model=64, pos_encoding="fire", train_length=40)
    enc = build_position_encoding(cfg)
    assert isinstance(enc, FIRE) and enc.threshold == 40.0  # L₀ defaults to the training length
    positions = _positions(100)
    bias = enc.bias(positions, positions)

    def psi(x):
        return math.log(abs(0.1 * x) + 1)

    for i, j in [(10, 3), (90, 5), (60, 60)]:
        x = psi(i - j) / (psi(max(i, 40.0)) + 1e-6)
        expected = enc.mlp(torch.tensor([[x]]))[0]
        torch.testing.assert_close(bias[:, i, j], expected)


def test_fire_width_is_independent_of_d_dape():
    widths = set()
    for d_dape in (4, 32, 64):
        model = build_model(ModelConfig(preset="tiny", pos_encoding="fire", processor="dapev2", d_dape=d_dape))
        widths.add(model.blocks[0].attn.pos.mlp[0].out_features)
    assert widths == {32}
    model = build_model(ModelConfig(preset="tiny", pos_encoding="fire", processor="dapev2", d_dape=64, fire_width=16))
    assert model.blocks[0].attn.pos.mlp[0].out_features == 16


def test_t5_buckets():
    distance = torch.tensor([0, 1, 15, 16, 20, 32, 64, 127, 128, 5000])
    buckets = t5_causal_bucket(distance, T5_BUCKETS, T5_MAX_DISTANCE).tolist()
    assert buckets[:3] == [0, 1, 15]  # exact below 16
    assert buckets[3] == 16 and buckets[-2:] == [31, 31]  # log-spaced from 16, capped at the last bucket
    assert buckets == sorted(buckets)
    expected_20 = 16 + int(math.log(20 / 16) / math.log(128 / 16) * 16)
    assert buckets[4] == expected_20


def test_t5_table_is_shared_by_all_layers_and_scaled():
    model = build_model(ModelConfig(preset="tiny", n_layer=3, pos_encoding="t5"))
    encodings = [block.attn.pos for block in model.blocks]
    assert all(enc is encodings[0] for enc in encodings)
    enc = encodings[0]
    assert isinstance(enc, T5Bias) and enc.scale == math.sqrt(32)
    bias = enc.bias(_positions(20), _positions(20))
    torch.testing.assert_close(bias[:, 19, 2], enc.table[16] * math.sqrt(32))  # Δ = 17 -> bucket 16


def test_rope_scores_depend_only_on_relative_position_at_any_length():
    rope = RoPE(16)
    q, k = torch.randn(1, 1, 1, 16).expand(1, 1, 2, 16), torch.randn(1, 1, 1, 16).expand(1, 1, 2, 16)
    q_pos, k_pos = torch.tensor([5, 20005]), torch.tensor([2, 20002])  # far beyond any training length
    rq, rk = rope.rotate(q, k, q_pos, k_pos)
    scores = (rq * rk).sum(-1)
    assert scores[0, 0, 0].item() == pytest.approx(scores[0, 0, 1].item(), rel=1e-3, abs=1e-3)


def test_yarn_is_rope_up_to_the_training_length_and_scales_beyond():
    rope, yarn = RoPE(64), YaRN(64, train_length=512)
    torch.testing.assert_close(yarn.frequencies(512)[0], rope.inv_freq)
    assert yarn.frequencies(512)[1] == 1.0
    inv_freq, mscale = yarn.frequencies(2048)
    assert mscale == pytest.approx(0.1 * math.log(4) + 1)
    turns = 512 * rope.inv_freq / (2 * math.pi)
    fast, slow = turns > 32, turns < 1
    assert fast.any() and slow.any()
    torch.testing.assert_close(inv_freq[fast], rope.inv_freq[fast])  # many turns: extrapolated (kept)
    torch.testing.assert_close(inv_freq[slow], rope.inv_freq[slow] / 4)  # few turns: interpolated
    middle = ~fast & ~slow
    assert ((inv_freq[middle] < rope.inv_freq[middle]) & (inv_freq[middle] > rope.inv_freq[middle] / 4)).all()
    q = k = torch.randn(1, 1, 2048, 64)
    rq, _ = yarn.rotate(q, k, _positions(2048), _positions(2048))
    torch.testing.assert_close(rq.norm(dim=-1), q.norm(dim=-1) * mscale)


def test_randomized_rope_positions():
    cfg = ModelConfig(preset="tiny", pos_encoding="rope_random", train_length=16)
    enc = build_position_encoding(cfg)
    assert isinstance(enc, RandomizedRoPE) and enc.max_position == 128  # default 8 x train_length
    enc.train()
    first, second = enc.sequence_positions(16, torch.device("cpu")), enc.sequence_positions(16, torch.device("cpu"))
    for positions in (first, second):
        assert positions.shape == (16,) and (positions.diff() > 0).all()
        assert positions.min() >= 0 and positions.max() < 128
    assert not torch.equal(first, second)
    enc.eval()
    assert torch.equal(enc.sequence_positions(200, torch.device("cpu")), torch.arange(200))
    enc.train()
    with pytest.raises(ValueError, match="rope_random_max"):
        enc.sequence_positions(129, torch.device("cpu"))
    cfg = ModelConfig(preset="tiny", pos_encoding="rope_random", rope_random_max=999)
    assert build_position_encoding(cfg).max_position == 999


def test_every_encoding_the_config_accepts_has_a_builder():
    """ModelConfig's Literal is the one check of the name (the builders no longer re-check it): every name it
    accepts builds, on every layer, and nothing else is accepted."""
    for name in POS_ENCODINGS:
        cfg = ModelConfig(preset="tiny", pos_encoding=name)
        assert len(build_position_encodings(cfg)) == cfg.n_layer
    with pytest.raises(ValueError, match="rope_random"):
        ModelConfig(preset="tiny", pos_encoding="xpos")

"""The bidirectional (encoder-only) setting of docs/method.md §7: `ModelConfig(causal=False)`."""

import pytest
import torch

from dape_core import ModelConfig, build_model
from dape_core.encodings.base import build_position_encoding

BIAS_ENCODINGS = ("alibi", "kerple", "kerple_power", "fire", "t5")
RECIPES = [("nope", "none"), ("rope", "none"), ("kerple", "none"), ("alibi", "dapev2"), ("nope", "dapev2"),
           ("kerple", "dape"), ("fire", "dapev2"), ("t5", "none")]


def _model(pos, processor, causal, **extra):
    torch.manual_seed(0)
    cfg = ModelConfig(preset="tiny", vocab_size=16, pos_encoding=pos, processor=processor, kernel_size=3,
                      d_dape=8, causal=causal, **extra)
    return build_model(cfg).eval()


@pytest.mark.parametrize("pos,processor", RECIPES)
def test_bidirectional_output_reads_later_tokens(pos, processor):
    tokens = torch.randint(0, 16, (2, 12), generator=torch.Generator().manual_seed(1))
    changed = tokens.clone()
    changed[:, 9] = (changed[:, 9] + 1) % 16  # a token after position 3
    for causal in (True, False):
        model = _model(pos, processor, causal)
        with torch.no_grad():
            before, after = model(tokens)[:, 3], model(changed)[:, 3]
        if causal:
            torch.testing.assert_close(before, after)  # the causal model cannot see it
        else:
            assert (before - after).abs().max() > 1e-4, "a bidirectional model must read later tokens"


@pytest.mark.parametrize("pos", BIAS_ENCODINGS)
def test_symmetric_bias_equals_its_transpose(pos):
    cfg = ModelConfig(preset="tiny", pos_encoding=pos, causal=False)
    encoding = build_position_encoding(cfg)
    positions = torch.arange(40)  # below FIRE's L0 (= train_length), where its normalisation is row-independent
    with torch.no_grad():
        bias = encoding.bias(positions, positions)
    torch.testing.assert_close(bias, bias.transpose(-1, -2))
    assert not torch.allclose(bias[:, 0, 5], bias[:, 0, 0]), "the bias above the diagonal must vary with |i - j|"


@pytest.mark.parametrize("pos", BIAS_ENCODINGS)
def test_causal_bias_keeps_the_clamp(pos):
    encoding = build_position_encoding(ModelConfig(preset="tiny", pos_encoding=pos))
    positions = torch.arange(10)
    with torch.no_grad():
        bias = encoding.bias(positions, positions)
    torch.testing.assert_close(bias[:, 0, 7], bias[:, 0, 0])  # Δ clamped to 0 above the diagonal


@pytest.mark.parametrize("pos,processor", [("kerple", "dapev2"), ("alibi", "none"), ("nope", "dape")])
def test_bidirectional_block_path_equals_direct_path(pos, processor):
    tokens = torch.randint(0, 16, (2, 50), generator=torch.Generator().manual_seed(2))
    direct = _model(pos, processor, False, eval_block_size=None)
    blocked = _model(pos, processor, False, eval_block_size=16)
    with torch.no_grad():
        torch.testing.assert_close(blocked(tokens), direct(tokens), rtol=1e-4, atol=1e-5)


def test_bidirectional_training_block_path_matches_direct_gradients():
    tokens = torch.randint(0, 16, (2, 24), generator=torch.Generator().manual_seed(3))
    grads = []
    for block in (None, 8):
        model = _model("kerple", "dapev2", False, attention_block_size=block).train()
        model(tokens, tokens)[1].backward()
        grads.append(model.blocks[0].attn.qkv.weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-6)

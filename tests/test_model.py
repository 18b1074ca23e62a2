"""Model behaviour: shapes, causality of every processor, the leak the `tril` prevents."""

import pytest
import torch

from dape_core import ModelConfig, build_model
from dape_core.position import alibi_slopes

ENCODINGS = ["nope", "rope", "alibi", "kerple"]


def _perturbed_future(tokens: torch.Tensor, t: int, vocab: int) -> torch.Tensor:
    changed = tokens.clone()
    changed[:, t + 1 :] = (changed[:, t + 1 :] + 1 + torch.randint(0, vocab - 1, changed[:, t + 1 :].shape)) % vocab
    assert (changed[:, t + 1 :] != tokens[:, t + 1 :]).all()
    return changed


def _max_past_change(cfg: ModelConfig, length: int = 24, t: int = 11) -> float:
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    tokens = torch.randint(0, cfg.vocab_size, (2, length))
    with torch.no_grad():
        before = model(tokens)
        after = model(_perturbed_future(tokens, t, cfg.vocab_size))
    return (before[:, : t + 1] - after[:, : t + 1]).abs().max().item()


def test_public_api_returns_logits():
    cfg = ModelConfig(preset="tiny", vocab_size=256, pos_encoding="kerple", processor="dapev2", kernel_size=3, d_dape=32, leak=False)
    tokens = torch.randint(0, 256, (3, 17))
    logits = build_model(cfg)(tokens)
    assert logits.shape == (3, 17, 256)
    logits2, loss = build_model(cfg)(tokens, tokens)
    assert logits2.shape == (3, 17, 256) and loss.ndim == 0 and torch.isfinite(loss)


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("processor,kernel", [("none", 1), ("dape", 1), ("dapev2", 3), ("dapev2", 5)])
def test_future_tokens_do_not_change_past_logits(encoding, processor, kernel):
    cfg = ModelConfig(preset="tiny", pos_encoding=encoding, processor=processor, kernel_size=kernel, d_dape=16)
    assert _max_past_change(cfg) <= 1e-5


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("kernel", [3, 5])
def test_dropping_tril_leaks_future_tokens(encoding, kernel):
    cfg = ModelConfig(preset="tiny", pos_encoding=encoding, processor="dapev2", kernel_size=kernel, d_dape=16, leak=True)
    assert _max_past_change(cfg) > 1e-4  # ten times the causality tolerance


def test_dape_v1_equals_dapev2_with_kernel_one():
    torch.manual_seed(0)
    v1 = build_model(ModelConfig(preset="tiny", processor="dape", d_dape=8))
    v2 = build_model(ModelConfig(preset="tiny", processor="dapev2", kernel_size=1, d_dape=8))
    v2.load_state_dict(v1.state_dict())
    tokens = torch.randint(0, 256, (2, 20))
    torch.testing.assert_close(v1(tokens), v2(tokens))


def test_processor_changes_the_function():
    torch.manual_seed(0)
    base = build_model(ModelConfig(preset="tiny", processor="none"))
    torch.manual_seed(0)
    dape = build_model(ModelConfig(preset="tiny", processor="dapev2", kernel_size=3))
    tokens = torch.randint(0, 256, (1, 16))
    assert not torch.allclose(base(tokens), dape(tokens))


@pytest.mark.parametrize("heads", [12, 16, 32])
def test_alibi_slopes_match_formula(heads):
    slopes = alibi_slopes(heads)
    if heads in (16, 32):
        expected = [2 ** (-8 * (k + 1) / heads) for k in range(heads)]
    else:  # 12 heads: the 8 slopes of H=8, then every other slope of H=16
        expected = [2 ** (-(k + 1)) for k in range(8)] + [2 ** (-8 * (k + 1) / 16) for k in range(16)][0::2][:4]
    torch.testing.assert_close(slopes, torch.tensor(expected))


@pytest.mark.parametrize("bad", [{"kernel_size": 2}, {"pos_encoding": "sinusoid"}, {"processor": "cnn"}, {"d_dape": 0}, {"preset": "huge"}])
def test_invalid_config_names_the_problem(bad):
    with pytest.raises(ValueError) as error:
        ModelConfig(**bad)
    assert next(iter(bad)) in str(error.value)

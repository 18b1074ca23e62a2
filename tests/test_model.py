"""Model behaviour: shapes, causality of every encoding x processor pair, the leak the `tril` prevents,
length extrapolation, parameter counts."""

import math

import pytest
import torch

from dape_core import PRESETS, ModelConfig, build_model
from dape_core.config import POS_ENCODINGS

ENCODINGS = list(POS_ENCODINGS)
BIAS_ENCODINGS = ["alibi", "kerple", "kerple_power", "fire", "t5"]
# (processor, kernel): 1xk kernels and 2-D kernels kq x kk (causal on the query axis).
PROCESSORS = [("none", 1), ("dape", 1), ("dapev2", 3), ("dapev2", 5), ("dapev2", (2, 3)), ("dapev2", (3, 1)),
              ("dapev2", (3, 5))]
WIDE_KERNELS = [3, 5, (2, 3), (3, 5)]  # wider than one key: leak without the tril
NARROW_KERNELS = [1, (3, 1)]  # one key wide: nothing to the right of the diagonal is read


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny tensors: see tests/conftest.py


def _perturbed_future(tokens: torch.Tensor, t: int, vocab: int) -> torch.Tensor:
    changed = tokens.clone()
    changed[:, t + 1 :] = (changed[:, t + 1 :] + 1 + torch.randint(0, vocab - 1, changed[:, t + 1 :].shape)) % vocab
    assert (changed[:, t + 1 :] != tokens[:, t + 1 :]).all()
    return changed


def _max_past_change(cfg: ModelConfig, length: int = 24, t: int = 11, train: bool = False) -> float:
    """Largest change of the logits at positions <= t when every token after t changes."""
    torch.manual_seed(0)
    model = build_model(cfg).train(train)
    tokens = torch.randint(0, cfg.vocab_size, (2, length))
    changed = _perturbed_future(tokens, t, cfg.vocab_size)
    with torch.set_grad_enabled(train):
        torch.manual_seed(1)  # randomized RoPE samples the same positions for both calls
        before = model(tokens)
        torch.manual_seed(1)
        after = model(changed)
    return (before[:, : t + 1] - after[:, : t + 1]).abs().max().item()


def test_public_api_returns_logits():
    cfg = ModelConfig(preset="tiny", vocab_size=256, pos_encoding="kerple", processor="dapev2", kernel_size=3,
                      d_dape=32, leak=False)
    tokens = torch.randint(0, 256, (3, 17))
    logits = build_model(cfg)(tokens)
    assert logits.shape == (3, 17, 256)
    logits2, loss = build_model(cfg)(tokens, tokens)
    assert logits2.shape == (3, 17, 256) and loss.ndim == 0 and torch.isfinite(loss)


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("processor,kernel", PROCESSORS, ids=str)
@pytest.mark.parametrize("path", ["direct", "block"])
def test_future_tokens_do_not_change_past_logits(encoding, processor, kernel, path):
    block = 8 if path == "block" else None  # T = 24: three row blocks
    cfg = ModelConfig(preset="tiny", pos_encoding=encoding, processor=processor, kernel_size=kernel, d_dape=16,
                      train_length=16, eval_block_size=block)
    assert _max_past_change(cfg) <= 1e-5


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_training_mode_block_path_is_causal(encoding):
    cfg = ModelConfig(preset="tiny", pos_encoding=encoding, processor="dapev2", kernel_size=(2, 3), d_dape=16,
                      train_length=16, attention_block_size=8)
    assert _max_past_change(cfg, train=True) <= 1e-5


@pytest.mark.parametrize("form", ["concat_residual", "concat", "add_residual", "bias_only"])
@pytest.mark.parametrize("encoding", BIAS_ENCODINGS)
def test_every_output_form_is_causal(form, encoding):
    cfg = ModelConfig(preset="tiny", pos_encoding=encoding, processor="dapev2", kernel_size=3, d_dape=16, form=form)
    assert _max_past_change(cfg) <= 1e-5


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("kernel", WIDE_KERNELS, ids=str)
def test_dropping_tril_leaks_future_tokens(encoding, kernel):
    cfg = ModelConfig(preset="tiny", pos_encoding=encoding, processor="dapev2", kernel_size=kernel, d_dape=16,
                      leak=True, train_length=16)
    assert _max_past_change(cfg) > 1e-4  # ten times the causality tolerance


@pytest.mark.parametrize("encoding", ["nope", "kerple"])
@pytest.mark.parametrize("kernel", NARROW_KERNELS, ids=str)
def test_dropping_tril_is_harmless_for_kernels_one_key_wide(encoding, kernel):
    """Only a kernel wider than one key reads right of the diagonal; the leak test is not trivially true."""
    cfg = ModelConfig(preset="tiny", pos_encoding=encoding, processor="dapev2", kernel_size=kernel, d_dape=16,
                      leak=True)
    assert _max_past_change(cfg) <= 1e-5


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


@pytest.mark.parametrize("encoding,bias_channels", [("nope", False), ("rope", False), ("kerple", True), ("fire", True)])
def test_processor_input_channels(encoding, bias_channels):
    """2H input channels with a bias (concat forms), H without one (docs/method.md §3-§4)."""
    model = build_model(ModelConfig(preset="tiny", n_head=4, d_model=64, pos_encoding=encoding, processor="dapev2"))
    assert model.blocks[0].attn.processor.conv_in.in_channels == (8 if bias_channels else 4)


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("processor", ["none", "dapev2"])
def test_every_encoding_evaluates_at_eight_times_its_training_length(encoding, processor):
    """Train a few steps at length 16, then evaluate at 128 (the block path: eval_block_size 32)."""
    torch.manual_seed(0)
    cfg = ModelConfig(preset="tiny", pos_encoding=encoding, processor=processor, kernel_size=3, d_dape=8,
                      train_length=16, eval_block_size=32)
    model = build_model(cfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(3):
        tokens = torch.randint(0, 256, (4, 17))
        _, loss = model(tokens[:, :-1], tokens[:, 1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    tokens = torch.randint(0, 256, (2, 8 * 16 + 1))
    with torch.no_grad():
        logits, loss = model(tokens[:, :-1], tokens[:, 1:])
    assert logits.shape == (2, 128, 256)
    assert math.isfinite(loss.item()) and loss.item() < 2 * math.log(256)


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("processor,kernel,form", [("none", 1, "concat_residual"), ("dape", 1, "concat_residual"),
                                                   ("dapev2", (2, 5), "concat_residual"), ("dapev2", 3, "concat"),
                                                   ("dapev2", 3, "add_residual")], ids=str)
def test_parameter_count_matches_the_analytic_count(encoding, processor, kernel, form):
    cfg = ModelConfig(preset="tiny", pos_encoding=encoding, processor=processor, kernel_size=kernel, form=form,
                      d_dape=12)
    assert build_model(cfg).num_parameters() == cfg.num_parameters()


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("encoding,processor", [("kerple", "dapev2"), ("t5", "none"), ("fire", "dape")])
def test_preset_parameter_counts(preset, encoding, processor):
    """Paper sizes are built on the meta device: shapes only, no memory, no time."""
    cfg = ModelConfig(preset=preset, vocab_size=50257, pos_encoding=encoding, processor=processor)
    with torch.device("meta"):
        model = build_model(cfg)
    assert model.num_parameters() == cfg.num_parameters()
    layers, width, heads = PRESETS[preset]
    assert (cfg.n_layer, cfg.d_model, cfg.n_head) == (layers, width, heads)
    if preset == "125M":  # GPT-3's 125M has tied embeddings; docs/method.md §5.1's model unties them (+38.6M)
        transformer = cfg.num_parameters() - 2 * 50257 * 768
        assert 84e6 < transformer < 87e6


def test_paper_head_dims():
    assert [ModelConfig(preset=p).head_dim for p in ("125M", "350M", "2.7B", "6.7B")] == [64, 64, 80, 128]


@pytest.mark.parametrize("bad", [{"kernel_size": 2}, {"kernel_size": (2, 4)}, {"kernel_size": (0, 3)},
                                 {"pos_encoding": "sinusoid"}, {"processor": "cnn"}, {"d_dape": 0},
                                 {"preset": "huge"}, {"form": "mlp"}, {"train_length": 0},
                                 {"attention_block_size": 0}])
def test_invalid_config_names_the_problem(bad):
    with pytest.raises(ValueError) as error:
        ModelConfig(**bad)
    assert next(iter(bad)) in str(error.value)


def test_unknown_encoding_lists_the_valid_names():
    with pytest.raises(ValueError) as error:
        ModelConfig(pos_encoding="sinusoid")
    for name in POS_ENCODINGS:
        assert name in str(error.value)


def test_leak_is_recorded_in_the_config_dict():
    assert ModelConfig(processor="dapev2", leak=True).to_dict()["leak"] is True
    assert ModelConfig().to_dict()["leak"] is False

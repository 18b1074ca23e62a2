"""The evaluation's tail-only forward (`CausalLM.forward(tail=K)`: the last layer computes only the last K query
rows, over all their keys, with the processor's halo) gives the full forward's last K logits, for every kind of
processor kernel and position encoding, on the direct and the block path; and `tail_loss` reads it."""

import pytest
import torch

from dape_core import ModelConfig, build_model
from dape_core.evaluate.perplexity import tail_logits_only, tail_loss

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny tensors: see tests/conftest.py

TOL = 1e-5

PROCESSORS = [
    {"processor": "none"},
    {"processor": "dape"},  # 1x1
    {"processor": "dapev2", "kernel_size": 3},  # 1x3
    {"processor": "dapev2", "kernel_size": (3, 3)},  # spans query rows: needs the row halo
    {"processor": "dapev2", "kernel_size": 3, "leak": True},  # key halo 2·(k//2)
]
ENCODINGS = ["rope", "kerple", "alibi", "nope"]


def _model(eval_block_size, **overrides):
    torch.manual_seed(0)
    cfg = dict(preset="tiny", n_layer=2, d_dape=8, train_length=16, eval_block_size=eval_block_size, **overrides)
    model = build_model(ModelConfig(**cfg)).eval()
    return model


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("params", PROCESSORS, ids=lambda p: "-".join(str(v) for v in p.values()))
@pytest.mark.parametrize("length,block", [(37, None), (53, 8)])
def test_tail_forward_equals_full_forward_tail(encoding, params, length, block):
    model = _model(block, pos_encoding=encoding, **params)
    tokens = torch.randint(0, 256, (3, length), generator=torch.Generator().manual_seed(length))
    with torch.no_grad():
        full = model(tokens)
        for tail in (1, 5, 16):
            part = model(tokens, tail=tail)
            assert part.shape == (3, tail, full.shape[-1])
            torch.testing.assert_close(part, full[:, -tail:], rtol=TOL, atol=TOL)
        # A tail as long as the sequence is the full forward.
        torch.testing.assert_close(model(tokens, tail=length), full, rtol=0, atol=0)


@pytest.mark.parametrize("params", [PROCESSORS[0], PROCESSORS[2], PROCESSORS[3]], ids=["none", "1x3", "3x3"])
def test_tail_forward_of_a_bidirectional_encoder(params):
    """causal=False: the tail rows attend over every key, before and after them, as in the full forward."""
    model = _model(None, pos_encoding="kerple", causal=False, **params)
    tokens = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(model(tokens, tail=7), model(tokens)[:, -7:], rtol=TOL, atol=TOL)


def test_tail_changes_with_the_context_it_reads():
    """The tail rows really read the earlier rows' keys (a change far before the tail moves the tail logits)."""
    model = _model(None, pos_encoding="kerple", processor="dapev2", kernel_size=3)
    tokens = torch.randint(0, 256, (1, 40), generator=torch.Generator().manual_seed(1))
    changed = tokens.clone()
    changed[0, 2] = (changed[0, 2] + 1) % 256
    with torch.no_grad():
        assert not torch.allclose(model(tokens, tail=8), model(changed, tail=8))


@pytest.mark.parametrize("params", PROCESSORS[1:4], ids=["1x1", "1x3", "3x3"])
def test_tail_loss_equals_the_full_forward_loss(params):
    """`tail_loss` (tail-only forward) equals the loss of the full forward's last K logits (the old computation)."""
    model = _model(None, pos_encoding="kerple", **params)
    windows = torch.randint(0, 256, (6, 41), generator=torch.Generator().manual_seed(3))
    fast = tail_loss(model, windows, 8, batch_size=4)
    with torch.no_grad(), tail_logits_only(model, 8):
        logits = model(windows[:, :-1])[:, -8:]
    reference = torch.nn.functional.cross_entropy(logits.flatten(0, 1), windows[:, -8:].flatten()).item()
    assert fast == pytest.approx(reference, rel=1e-6)


def test_tail_and_targets_exclude_each_other():
    model = _model(None, pos_encoding="kerple")
    tokens = torch.randint(0, 256, (1, 10))
    with pytest.raises(ValueError, match="tail and targets"):
        model(tokens, tokens, tail=4)

"""Each position encoding's record (dape_core/encodings/, one file each) says what its module does: the config, the
applicability rule, the fused path and the estimates read the record, so a record that disagrees with the
module would mislead all of them at once."""

from dataclasses import fields

import pytest
import torch

from dape_core.config import ModelConfig
from dape_core.encodings import ENCODING_SETTINGS, ENCODINGS
from dape_core.encodings.base import build_position_encodings


@pytest.mark.parametrize("name", list(ENCODINGS))
def test_the_record_matches_the_module(name):
    facts = ENCODINGS[name]
    cfg = ModelConfig(preset="tiny", pos_encoding=name, n_layer=2)
    layers = build_position_encodings(cfg)
    encoding = layers[0]
    assert encoding.facts is facts and encoding.has_bias == facts.has_bias
    positions = torch.arange(12)
    bias = encoding.bias(positions, positions)
    assert (bias is not None) == facts.has_bias
    q, k = torch.randn(2, 1, cfg.n_head, 12, cfg.head_dim).unbind(0)
    rotated_q, _ = encoding.rotate(q, k, positions, positions)
    assert (not torch.equal(rotated_q, q)) == facts.rotary
    if facts.toeplitz:  # one value per distance: every diagonal of the causal part is constant
        lower = torch.tril(bias.detach())
        for offset in range(12):
            diagonal = torch.diagonal(lower, -offset, dim1=1, dim2=2)
            assert torch.allclose(diagonal, diagonal[:, :1].expand_as(diagonal))
    assert (layers[0] is layers[1]) == facts.shared
    learned = sum(p.numel() for p in encoding.parameters())
    assert learned == facts.learned(cfg)
    options = {setting.name for setting in facts.options}  # settings of its own, under model.options
    assert set(facts.settings) - options <= {f.name for f in fields(ModelConfig)}
    assert set(facts.defaults) <= set(facts.settings) - options


def test_fire_is_the_one_bias_of_more_than_the_distance():
    assert [name for name, facts in ENCODINGS.items() if not facts.fused] == ["fire"]
    assert ENCODING_SETTINGS == {"fire_width", "fire_l0", "rope_random_max"}

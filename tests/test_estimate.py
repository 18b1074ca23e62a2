"""`orchestrator plan`'s cost estimate: the score processor's input channels follow its form."""

import pytest

from dape_core import ExperimentConfig, ModelConfig, build_model
from dape_core.processors.dape_torch import ConvScoreProcessor
from orchestrator.planning.estimate import estimate, forward_flops_per_sequence, processor_in_channels

FORMS = ["concat_residual", "concat", "add_residual", "bias_only"]


# bias_only needs a bias encoding: validation refuses it with rope or nope.
CASES = [(form, encoding) for form in FORMS for encoding in ("kerple", "alibi", "rope", "nope")
         if not (form == "bias_only" and encoding in ("rope", "nope"))]


@pytest.mark.parametrize("form, encoding", CASES)
def test_input_channels_are_those_of_the_built_processor(form, encoding):
    cfg = ModelConfig(preset="tiny", pos_encoding=encoding, processor="dapev2", form=form, kernel_size=3, d_dape=8)
    built = next(m for m in build_model(cfg).modules() if isinstance(m, ConvScoreProcessor))
    assert processor_in_channels(cfg) == built.conv_in.in_channels
    concatenated = form in ("concat_residual", "concat") and encoding in ("kerple", "alibi")
    expected = 2 * cfg.n_head if concatenated else cfg.n_head
    assert processor_in_channels(cfg) == expected


def test_forms_reading_one_map_cost_less_than_the_concatenating_ones():
    def processor_flops(form: str) -> float:
        cfg = ModelConfig(preset="tiny", pos_encoding="kerple", processor="dapev2", form=form, kernel_size=3, d_dape=8)
        plain = ModelConfig(preset="tiny", pos_encoding="kerple")
        parameters = cfg.num_parameters()
        return forward_flops_per_sequence(cfg, 64, parameters) - forward_flops_per_sequence(plain, 64, parameters)

    # Conv(C_in -> D) + Conv(D -> H) per score: (C_in + H) D k MACs, 2 FLOPs each, per layer and score.
    cfg = ModelConfig(preset="tiny", pos_encoding="kerple", processor="dapev2", kernel_size=3, d_dape=8)
    per_channel = cfg.n_layer * 2 * cfg.d_dape * 3 * 64**2
    assert processor_flops("concat_residual") == processor_flops("concat") == per_channel * 3 * cfg.n_head
    assert processor_flops("add_residual") == processor_flops("bias_only") == per_channel * 2 * cfg.n_head


def test_estimate_of_an_add_residual_trial_is_below_the_concat_residual_one():
    costs = {form: estimate(ExperimentConfig(model={"preset": "tiny", "pos_encoding": "kerple", "processor": "dapev2",
                                                    "form": form}), gpus=0, cpus=1) for form in FORMS}
    assert costs["add_residual"].flops_per_step < costs["concat_residual"].flops_per_step
    assert costs["add_residual"].peak_memory_bytes < costs["concat_residual"].peak_memory_bytes
    assert costs["bias_only"].flops_per_step == costs["add_residual"].flops_per_step

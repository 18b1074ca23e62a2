"""The metric names' one home (dape_core/metric_names.py) agrees with what a result logs: a study is checked against
these names before any trial runs, so a name the result gains or loses must change there too."""

import pytest

from dape_core import metric_names as names
from dape_core.experiment import ExperimentResult


def _result(**fields) -> ExperimentResult:
    common = dict(final_train_loss=2.5, train_seconds=3.0, eval_seconds=1.0, tokens_seen=100, num_parameters=10,
                  data_hash="h")
    return ExperimentResult(**{**common, **fields})


@pytest.mark.parametrize("timed", [False, True])
def test_an_lm_result_has_the_names_its_shape_gives(timed):
    lengths = {64: 3.0, 256: 4.0}
    result = _result(perplexity=lengths, delta_p=lengths, ms_forward=lengths if timed else {}, ms_per_step=5.0)
    assert set(result.metrics()) == names.result_names(lengths=[64, 256], timed=timed)
    untimed = _result(perplexity=lengths, delta_p=lengths, weights=["model.safetensors"])
    assert set(untimed.metrics()) == names.result_names(lengths=[64, 256], timed_steps=False, weights=True)


def test_a_che_result_has_the_names_its_shape_gives():
    result = _result(perplexity={}, che_acc_train=0.9, che_acc_test=0.5, che_accuracy={40: 0.6, 100: 0.4},
                     ms_per_step=5.0)
    assert set(result.metrics()) == names.result_names(che_test_lengths=[40, 100])
    assert names.by_length(result.metrics(), names.ACC) == {40: 0.6, 100: 0.4}


def test_per_length_names_are_built_and_parsed_by_one_rule():
    assert names.per_length(names.PPL, 512) == "ppl_512"
    assert names.length_of("ppl_512", names.PPL) == 512
    assert names.length_of("ppl_512.k32.n64", names.PPL) is None  # another protocol's: not this family
    assert names.length_of("delta_p_512", names.PPL) is None
    assert names.per_length_pattern(names.MS_FORWARD).match("ms_forward_128").group(1) == "128"
    assert set(names.SERIES.values()) == {names.PPL, names.DELTA_P, names.ACC}

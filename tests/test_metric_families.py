"""The metric families are declared once (orchestrator/study/metric_families.py): report.metric's type, the
study's check of it and the report's tables all read the same records and the same column rule."""

from __future__ import annotations

import typing

import pytest

from dape_core import metric_names as names
from dape_core.experiment import ExperimentResult
from orchestrator.reporting.families import FAMILIES, higher_is_better
from orchestrator.study import StudyError, parse_study
from orchestrator.study.metric_families import METRIC_FAMILIES, family_of
from orchestrator.study.model import ReportMetric


def test_report_metric_and_the_report_tables_come_from_the_declaration():
    assert typing.get_args(ReportMetric) == tuple(family.name for family in METRIC_FAMILIES)
    assert [family.declared for family in FAMILIES] == list(METRIC_FAMILIES)
    assert [(family.metric, family.title, family.lower_is_better) for family in FAMILIES] == [
        (declared.name, declared.label, declared.lower_is_better) for declared in METRIC_FAMILIES]


@pytest.mark.parametrize("column, family", [
    (names.per_length(names.PPL, 128), "ppl"), (names.per_length(names.DELTA_P, 128), "delta_p"),
    (names.CHE_ACC_TEST, "accuracy"), (names.per_length(names.ACC, 40), "accuracy"),
    (names.MS_PER_STEP, "time"), (names.TRAIN_SECONDS, "time"), (names.EVAL_SECONDS, "time"),
    (names.per_length(names.MS_FORWARD, 64), "time"), (names.TRAIN_LOSS, None), (names.NUM_PARAMETERS, None),
])
def test_one_column_rule(column, family):
    found = family_of(column)
    assert (found.name if found else None) == family
    shown = [shown.metric for shown in FAMILIES if shown.match(column)]  # the report's tables read the same rule
    assert shown == ([family] if family else [])
    assert higher_is_better(column) is (found is not None and not found.lower_is_better)


def test_the_study_check_reads_the_declared_rule():
    study = {"name": "families", "base": {"model": {"d_model": 16, "n_layer": 1, "n_head": 2, "vocab_size": 256},
                                          "train": {"steps": 2, "batch_size": 2, "seq_len": 64}},
             "variants": [{"label": "a"}], "report": {"metric": "time"}}
    parse_study(study)  # every trial logs train_seconds and eval_seconds
    study["report"]["metric"] = "accuracy"  # a language-model study logs no accuracy column
    with pytest.raises(StudyError, match="report.metric: 'accuracy' has no column.*pick one of ppl, delta_p, time"):
        parse_study(study)


def test_a_result_names_each_value_by_its_field():
    result = ExperimentResult(perplexity={}, final_train_loss=1.0, train_seconds=2.0, eval_seconds=3.0, tokens_seen=4,
                              num_parameters=5, data_hash="h", flops_per_token=6.0, peak_memory_bytes=7 * 2**20)
    metrics = result.metrics()
    assert {name: metrics[name] for name in names.SCALARS} == {
        names.TRAIN_LOSS: 1.0, names.TRAIN_SECONDS: 2.0, names.EVAL_SECONDS: 3.0, names.TOKENS_SEEN: 4,
        names.NUM_PARAMETERS: 5, names.FLOPS_PER_TOKEN: 6.0, names.PEAK_MEMORY_MB: 7.0}

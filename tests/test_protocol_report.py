"""The report says which evaluation protocol each by-length column was measured under (docs/protocol.md): a
store written under protocol 2 says so once; a row of protocol 1 whose longest length `orchestrator evaluate`
added later (other text) is named in the tables' and the plot's captions and in the claims that divide across
its lengths. Synthetic store (tests/synthetic_store.py): the recorder's own runs, no training."""

from __future__ import annotations

import json

import pytest
from synthetic_store import write_store

from orchestrator import parse_study
from orchestrator.reporting import build_report
from orchestrator.run_context import RunContext
from orchestrator.trial.protocol import EVAL_PROTOCOL_TAG, EVALUATION_TAG_PREFIX

SPEC = {"name": "protocols", "base": {"model": {"preset": "tiny", "pos_encoding": "kerple", "d_dape": 8},
                                      "train": {"steps": 10, "batch_size": 2, "seq_len": 32},
                                      "eval": {"lengths": [32, 64, 128], "tail_tokens": 16, "n_windows": 4}},
        "variants": [{"label": "Kerple", "baseline": True, "set": {"model.processor": "none"}},
                     {"label": "DAPE", "set": {"model.processor": "dapev2", "model.kernel_size": 3}}],
        "expect": [{"id": "ratio", "kind": "compare", "source": "test", "text": "DAPE's ppl(4x)/ppl(1x) below Kerple's",
                    "variant": "DAPE", "direction": "below", "metric": "ppl", "at": ["4x"], "over": "1x"}]}


@pytest.fixture()
def store(tmp_path):
    study = parse_study(SPEC)
    return study, write_store(study, f"sqlite:///{tmp_path / 'mlflow.db'}")


def _captions(report) -> str:
    return " ".join(table.caption() for table in report.document.tables if table.family.by_length)


def test_a_store_of_one_protocol_says_it_once(store, tmp_path):
    study, written = store
    report = build_report(RunContext.of(study, written), tmp_path / "reports", attach=False)
    assert "Evaluation protocol 2: every length scores the same tail tokens" in _captions(report)
    assert "caution" not in " ".join(check.text for claim in report.claims for check in claim.checks)
    assert all("other text" not in plot.caption for plot in report.document.plots)


def test_an_old_row_with_a_length_added_later_is_named_where_it_is_read(store, tmp_path):
    study, written = store
    runs = {run.data.tags["label"]: run for run in written.trial_runs()}
    old = runs["DAPE"].info.run_id  # as a store written before protocol 2: no tag, and 128 added by `evaluate`
    written.client.delete_tag(old, EVAL_PROTOCOL_TAG)
    written.set_tags(old, {f"{EVALUATION_TAG_PREFIX}20250101T000000Z": json.dumps(
        {"lengths": [128], "metric_suffix": "", "visualise": False})})
    report = build_report(RunContext.of(study, written), tmp_path / "reports", attach=False)
    captions = _captions(report)
    assert "protocol 1: DAPE; protocol 2: Kerple" in captions
    assert "DAPE at L=128" in captions and "other text" in captions
    assert "Kerple at L=" not in captions  # the row of protocol 2 is not named
    length_plot = next(plot for plot in report.document.plots if plot.name == "perplexity_vs_length")
    assert "DAPE at L=128" in length_plot.caption
    ratio = next(claim for claim in report.claims if claim.claim.id == "ratio")
    assert all("caution: DAPE's L=128 scored later on other text" in check.text for check in ratio.checks)
    assert "DAPE at L=128" in (tmp_path / "reports" / "protocols" / "report.md").read_text()

"""`orchestrator evaluate --lengths` scores a longer length on the tails the trial's own lengths scored
(protocol 2, docs/protocol.md), and a row measured under an older protocol is scored again whole, never mixed.
A tiny study trained in-process into SQLite (tests/test_evaluate.py's helpers), evaluated in this process."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient
from test_evaluate import _evaluate, _runs, _train

from orchestrator.trial.protocol import EVAL_PROTOCOL_TAG

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow, pytest.mark.timeout(300)]


def test_a_length_added_later_scores_the_tails_of_the_row_and_old_rows_are_scored_again_whole(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path, uri = _train(tmp_path, "tails", [32, 64])
    trained = _runs(uri, "tails")
    assert {run.data.tags.get(EVAL_PROTOCOL_TAG) for run in trained.values()} == {"2"}
    result = _evaluate(path, uri, "--lengths", "128", "--local")
    assert result.exit_code == 0, result.output
    for label, run in _runs(uri, "tails").items():
        metrics = run.data.metrics
        # ΔP(128) = ppl at the training length on the evaluation's windows - ppl_128: it equals the ppl_32 the
        # trial logged in training, so the later windows end at the training's tails (other text would differ).
        assert metrics["delta_p_128"] == pytest.approx(trained[label].data.metrics["ppl_32"] - metrics["ppl_128"],
                                                       rel=1e-9, abs=1e-9), label
        assert run.data.tags[EVAL_PROTOCOL_TAG] == "2"

    # A row of an older protocol (a run without the tag): every length it has is scored again, with the new one.
    client = MlflowClient(uri)
    old = _runs(uri, "tails")["DAPE1x3"]
    client.delete_tag(old.info.run_id, EVAL_PROTOCOL_TAG)
    again = _evaluate(path, uri, "--lengths", "128", "--local")
    assert again.exit_code == 0, again.output
    assert "measured under evaluation protocol 1: every length it has is scored again under protocol 2" in again.output
    assert "1 trial(s) already evaluated with this protocol: skipped" in again.output  # DAPE: nothing missing
    for name in ("ppl_32", "ppl_64", "ppl_128"):
        history = [m.value for m in client.get_metric_history(old.info.run_id, name)]
        assert len(history) == 2 and history[0] == pytest.approx(history[1], rel=1e-9), name
    assert client.get_run(old.info.run_id).data.tags[EVAL_PROTOCOL_TAG] == "2"

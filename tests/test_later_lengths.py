"""Claims at lengths evaluated after training (`report.lengths`): validated without changing any trial's identity,
scored by `orchestrator run` once its trials finish (as `orchestrator evaluate STUDY` scores them), so a fresh run
ends with every claim judged, on exactly the values the trials would have logged with those lengths in
`eval.lengths`."""

from __future__ import annotations

import copy

import pytest
import yaml
from test_evaluate import BASE, VARIANTS, _evaluate, _runs  # the evaluate tests' tiny study and helpers

from orchestrator import StudyError, expand, parse_study

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CLAIMS = [  # at 4x = 128 tokens (training length 32): a length of report.lengths only
    {"id": "wider_better_at_4x", "kind": "compare", "source": "DAPE V2 Table 2", "variant": "DAPE1x3",
     "direction": "below", "metric": "ppl", "at": "4x"},
    {"id": "grows_to_4x", "kind": "length_ratio", "source": "DAPE V2 Figure 1", "variant": "DAPE", "metric": "ppl",
     "at": 128, "over": "1x", "at_least": 0.5},
    {"id": "own_length", "kind": "compare", "source": "DAPE V2 Table 2", "variant": "DAPE1x3",
     "direction": "below", "metric": "ppl", "at": 64},
]


def _spec(name: str, lengths: list[int], later: list | None = None, claims: list | None = None,
          variants: list = VARIANTS) -> dict:
    spec = {"name": name, "base": {**copy.deepcopy(BASE), "eval": {**BASE["eval"], "lengths": lengths}},
            "variants": variants, "resources": {"cpus": 1, "max_retries": 0}}
    if later is not None:
        spec["report"] = {"lengths": later}
    if claims:
        spec["expect"] = claims
    return spec


def test_claims_may_name_report_lengths_and_nothing_else():
    study = parse_study(_spec("ok", [32, 64], ["4x", 512], CLAIMS))
    assert study.report.lengths == ["4x", 512]
    assert study.report.later_lengths(32, [32, 64]) == [128, 512]
    # Not part of any trial's identity: the trials are those of the same study without report.lengths.
    plain = parse_study(_spec("ok", [32, 64]))
    assert [t.trial_id for t in expand(study)] == [t.trial_id for t in expand(plain)]
    # A length in neither eval.lengths nor report.lengths keeps its error, which now says how to add one.
    with pytest.raises(StudyError) as error:
        parse_study(_spec("bad", [32, 64], [512], CLAIMS[:1]))
    text = " ".join(str(error.value).split())
    assert "expect[0] (wider_better_at_4x): length '4x' (= 128) is not evaluated for 'DAPE1x3'" in text
    assert "evaluated later (report.lengths): [512]" in text
    assert "or add it to report.lengths and run orchestrator evaluate" in text
    # Evaluate logs no timing at a later length: a timing claim there is refused, with no hint to add it.
    with pytest.raises(StudyError) as error:
        parse_study(_spec("bad", [32], ["4x"], [{**CLAIMS[0], "metric": "ms_forward"}]))
    text = " ".join(str(error.value).split())
    assert "length '4x' (= 128) is not evaluated" in text and "report.lengths" not in text


def test_bad_report_lengths_are_named_each_with_its_field():
    with pytest.raises(StudyError) as error:
        parse_study(_spec("bad", [32], [0, "16y", True, 128, "-2x", [64]]))
    text = str(error.value)
    for index in (0, 1, 2, 4, 5):
        assert f"study.report.lengths.{index}" in text
    assert "study.report.lengths.3" not in text
    assert "'16y'" in text


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_fresh_run_judges_the_claims_at_its_report_lengths(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    from orchestrator.run import run_and_report
    from orchestrator.run_context import RunContext

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec = _spec("later", [32, 64], ["4x"], CLAIMS)
    path = tmp_path / "later.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    said: list[str] = []
    outcome = run_and_report(RunContext.create(parse_study(spec), uri, storage_dir=tmp_path / "state",
                                               local=True, study_path=path), tmp_path / "reports", say=said.append)
    assert outcome.ok, outcome.failed
    # Each trial scored 128 itself (tests/test_later_in_trial.py): the evaluation after training had nothing left.
    assert not any(line.startswith("Evaluating") for line in said), said
    # Every claim judged by the run itself, those at 4x = 128 (report.lengths only) included.
    assert {r.claim.id: r.verdict in ("holds", "fails") and r.seeds == 1 for r in outcome.claims} == \
        {claim["id"]: True for claim in CLAIMS}, [(r.claim.id, r.verdict, r.reason) for r in outcome.claims]
    text = (tmp_path / "reports" / "later" / "report.md").read_text()
    assert "not evaluated at 128 yet" not in text and "L=128" in text
    runs = _runs(uri, "later")
    for run in runs.values():
        assert {"ppl_128", "delta_p_128"} <= set(run.data.metrics)
    ppl = {label: run.data.metrics["ppl_128"] for label, run in runs.items()}
    verdicts = {r.claim.id: r for r in outcome.claims}
    assert (verdicts["wider_better_at_4x"].verdict == "holds") == (ppl["DAPE1x3"] < ppl["DAPE"])
    # Exactly what a trial trained with 128 in eval.lengths logs (bit-identical on CPU).
    long = _spec("long", [32, 64, 128], variants=VARIANTS[1:])
    assert run_and_report(RunContext.create(parse_study(long), uri, storage_dir=tmp_path / "state",
                                            local=True), tmp_path / "reports", say=said.append).ok
    assert runs["DAPE1x3"].data.metrics["ppl_128"] == _runs(uri, "long")["DAPE1x3"].data.metrics["ppl_128"]

    # Resumable: a second run has nothing to train or evaluate, and neither has `evaluate`, which ends with the
    # run's claims line.
    said.clear()
    again = run_and_report(RunContext.create(parse_study(spec), uri, storage_dir=tmp_path / "state",
                                             local=True, study_path=path), tmp_path / "reports", say=said.append)
    assert again.ok and len(again.skipped) == 2 and not said, said
    run_id = runs["DAPE"].info.run_id
    assert len(MlflowClient(uri).get_metric_history(run_id, "ppl_128")) == 1
    result = _evaluate(path, uri, "--local")
    assert result.exit_code == 0 and "already evaluated" in result.output, result.output
    from orchestrator.judging.claims import decision_summary

    assert f"Claims: {decision_summary(outcome.claims)}" in " ".join(result.output.split())


CHE_BASE = {"model": {"preset": "tiny", "n_layer": 1, "d_model": 32, "n_head": 2, "pos_encoding": "kerple",
                      "d_dape": 8, "processor": "dapev2", "kernel_size": 3},
            "train": {"log_every": 5},
            "che": {"task": "reverse_string", "train_max_length": 8, "steps": 10, "batch_size": 16,
                    "eval_batches": 2, "eval_batch_size": 16}}


def _che_spec(name: str, test_lengths: list[int], later: list | None = None, claims: list | None = None) -> dict:
    base = copy.deepcopy(CHE_BASE)
    base["che"]["test_lengths"] = test_lengths
    spec = {"name": name, "base": base, "variants": [{"label": "DAPE1x3-Kerple", "baseline": True}],
            "resources": {"cpus": 1, "max_retries": 0}}
    if later is not None:
        spec["report"] = {"lengths": later}
    if claims:
        spec["expect"] = claims
    return spec


@pytest.mark.slow
def test_che_trials_keep_weights_and_are_scored_at_new_test_lengths(tmp_path, monkeypatch):
    """A CHE trial keeps its model; `orchestrator run` scores its report.lengths and `orchestrator evaluate` a
    test length it was not trained to report, exactly as a trial with that length in che.test_lengths logs it
    (and its own lengths again, identically); a claim on it (report.lengths) is judged by the run."""
    import torch
    from mlflow.tracking import MlflowClient

    from orchestrator.run import run_and_report
    from orchestrator.run_context import RunContext

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    claim = {"id": "above_chance_at_3x", "kind": "bound", "source": "DAPE V2 CHE table", "metric": "acc",
             "at": "3x", "at_least": 0.0}
    spec = _che_spec("che_later", [9, 16], ["3x"], [claim])  # 3x = 24: evaluated after training
    path = tmp_path / "che_later.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    kwargs = {"storage_dir": tmp_path / "state", "local": True}
    ran = run_and_report(RunContext.create(parse_study(spec), uri, study_path=path, **kwargs), tmp_path / "reports")
    assert ran.ok and [r.verdict for r in ran.claims] == ["holds"]  # report.lengths (24) scored by the run
    run = _runs(uri, "che_later")["DAPE1x3-Kerple"]
    assert "orchestrator.weights" in run.data.tags, "a CHE trial keeps its model"
    report = tmp_path / "reports" / "che_later" / "report.md"

    def no_step(*args, **kwargs):
        raise AssertionError("an optimizer step was taken during evaluate")

    monkeypatch.setattr(torch.optim.AdamW, "step", no_step)
    again = _evaluate(path, uri, "--local", "--lengths", "12", "16")  # 12 between the own ones; 16 its own
    assert again.exit_code == 0, again.output
    monkeypatch.undo()
    after = _runs(uri, "che_later")["DAPE1x3-Kerple"].data.metrics
    assert {"acc_24", "acc_12"} <= set(after)
    assert len(MlflowClient(uri).get_metric_history(run.info.run_id, "acc_16")) == 1  # its own: skipped

    # Exactly what trials with those test lengths log (the strings of every length before it drawn first).
    for lengths, name in (([9, 16, 24], "with24"), ([9, 12, 16], "with12")):
        assert run_and_report(RunContext.create(parse_study(_che_spec(name, lengths)), uri, **kwargs),
                                                tmp_path / "reports").ok
        trained = _runs(uri, name)["DAPE1x3-Kerple"].data.metrics
        added = (set(lengths) - {9, 16}).pop()
        assert after[f"acc_{added}"] == trained[f"acc_{added}"], (name, after, trained)
        assert trained["acc_9"] == after["acc_9"]  # the same model: the same weights, the same strings
    text = report.read_text()
    assert "not evaluated at 24 yet" not in text and "above_chance_at_3x" in text

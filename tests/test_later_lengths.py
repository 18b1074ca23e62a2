"""Claims at lengths evaluated after training (`report.lengths`): validated without changing any trial's identity,
inconclusive in the report until `orchestrator evaluate STUDY` (no --lengths) scores those lengths, then judged
like any other claim on exactly the values the trials would have logged with those lengths in `eval.lengths`."""

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


def test_a_claim_at_a_later_length_waits_for_evaluate_then_is_judged(tmp_path, monkeypatch):
    from orchestrator.execution.runner import run_study

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec = _spec("later", [32, 64], ["4x"], CLAIMS)
    path = tmp_path / "later.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    outcome = run_study(parse_study(spec), uri, reports_dir=tmp_path / "reports", storage_dir=tmp_path / "state",
                        local=True, study_path=path)
    assert outcome.ok, outcome.failed
    report = tmp_path / "reports" / "later" / "report.md"
    text = report.read_text()
    waiting = f"not evaluated at 128 yet: orchestrator evaluate {path}"
    assert text.count(waiting) >= 2, text  # both claims at 4x: inconclusive, never an error or "fails"
    assert "does not fit the study" not in text
    runs = _runs(uri, "later")
    assert not any("ppl_128" in run.data.metrics for run in runs.values())

    # No --lengths: the report.lengths the finished trials lack, on the windows of eval.lengths + report.lengths.
    result = _evaluate(path, uri, "--local")
    assert result.exit_code == 0, result.output
    assert "2 trial(s) evaluated" in " ".join(result.output.split())
    runs = _runs(uri, "later")
    for run in runs.values():
        assert {"ppl_128", "delta_p_128"} <= set(run.data.metrics)
    # Exactly what a trial trained with 128 in eval.lengths logs (bit-identical on CPU).
    long = _spec("long", [32, 64, 128], variants=VARIANTS[1:])
    assert run_study(parse_study(long), uri, reports_dir=tmp_path / "reports", storage_dir=tmp_path / "state",
                     local=True).ok
    assert runs["DAPE1x3"].data.metrics["ppl_128"] == _runs(uri, "long")["DAPE1x3"].data.metrics["ppl_128"]

    text = report.read_text()
    assert "not evaluated at 128 yet" not in text
    assert "ppl_128" in text and "L=128" in text  # judged, and the tables have the new column
    from orchestrator.reporting.claims import evaluate_claims
    from orchestrator.reporting.results import load_results

    study = parse_study(spec)
    verdicts = {r.claim.id: r for r in evaluate_claims(study, load_results(study, uri), path)}
    assert all(r.verdict in ("holds", "fails") and r.seeds == 1 for r in verdicts.values()), verdicts
    ppl = {label: run.data.metrics["ppl_128"] for label, run in runs.items()}
    assert (verdicts["wider_better_at_4x"].verdict == "holds") == (ppl["DAPE1x3"] < ppl["DAPE"])
    # Evaluated: a second evaluate with no --lengths has nothing to do.
    again = _evaluate(path, uri, "--local")
    assert again.exit_code == 0 and "already evaluated" in again.output, again.output

"""Verdicts on values real training gives (issue 41), through the public commands on small stores written
without training (tests/synthetic_store.py): a diverged or failed evaluation is named and never decides a
claim, and the report builds; identical paired differences are not a p of 0."""

from __future__ import annotations

import math

import numpy as np
import pytest
import report_study
import synthetic_store
import yaml
from cli_support import run_cli
from mlflow.tracking import MlflowClient

from orchestrator import parse_study
from orchestrator.judging.claims import evaluate_claims
from orchestrator.judging.diverged import describe

BELOW = {"id": "below", "kind": "compare", "source": "test", "variant": "DAPE1x3-Kerple", "than": "baseline",
         "direction": "below", "metric": "ppl", "at": [64]}
INF_IN_SQLITE = 1.7976931348623157e308  # what MLflow's SQLite store gives back for +inf


def _store(tmp_path, values: dict[tuple[str, int], float] | None = None, seeds=(0, 1, 2), claims=(BELOW,),
           **changes):
    """A study file and its synthetic store; `values`: (label, seed) -> ppl_64 logged over the synthetic one."""
    spec = yaml.safe_load(yaml.safe_dump(report_study.STUDY))
    spec.update(seeds=list(seeds), expect=list(claims), **changes)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(spec))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    store = synthetic_store.write_store(parse_study(spec), uri)
    client = MlflowClient(uri)
    runs = {(run.data.tags["label"], int(run.data.tags["seed"])): run.info.run_id
            for run in client.search_runs([store.experiment_id], "tags.`orchestrator.role` = 'trial'")}
    for (label, seed), value in (values or {}).items():
        client.log_metric(runs[label, seed], "ppl_64", value, step=10_000)  # the last step: the final value
    return path, uri


def _report(capsys, tmp_path, path, uri) -> tuple[int, str, str]:
    code, output = run_cli(capsys, "report", path, "--tracking-uri", uri, "--reports-dir", tmp_path / "reports")
    folder = next((tmp_path / "reports").glob("**/report.md")).parent
    return code, output, (folder / "report.md").read_text()


@pytest.mark.parametrize("value", [INF_IN_SQLITE, math.nan])
def test_a_diverged_or_failed_seed_never_decides_a_claim_and_the_report_builds(tmp_path, capsys, value):
    """The baseline's seed 1 diverged; on the finite seeds the variant is far *above* the baseline, so any
    arithmetic on the diverged value would make "below" hold."""
    values = {("DAPE1x3-Kerple", seed): 90.0 + seed for seed in (0, 1, 2)}
    values.update({("DAPE-Kerple", 0): 40.0, ("DAPE-Kerple", 1): value, ("DAPE-Kerple", 2): 41.0})
    path, uri = _store(tmp_path, values)
    code, output, markdown = _report(capsys, tmp_path, path, uri)
    assert code == 0, output
    assert "Traceback" not in output
    named = "has no value (NaN: a failed evaluation" if math.isnan(value) else "diverged ("
    assert f"undecidable until rerun: DAPE-Kerple · s1 ppl_64 {named}" in markdown
    assert "1 undecidable until a diverged or failed seed is rerun" in output
    assert "**holds**" not in markdown and "**fails**" not in markdown
    if not math.isnan(value):  # the table says so, and computes nothing on it
        assert "diverged (1 of 3 seeds)" in markdown
        table = next((tmp_path / "reports").glob("**/table_perplexity.csv"))
        text = table.read_text()
        assert "diverged" in text.splitlines()[0] and "e+308" not in text and "inf" not in text.lower()
        assert list((table.parent / "plots").glob("*.png"))


def test_identical_paired_differences_are_not_a_p_of_zero(tmp_path, capsys):
    """The variant is the baseline minus 1e-9 on every seed: a t-test would give p = 0 (t infinite)."""
    base = {("DAPE-Kerple", seed): 40.0 + 3 * seed for seed in range(4)}
    values = {**base, **{("DAPE1x3-Kerple", seed): value - 1e-9 for (_, seed), value in base.items()}}
    path, uri = _store(tmp_path, values, seeds=(0, 1, 2, 3))
    code, output, markdown = _report(capsys, tmp_path, path, uri)
    assert code == 0, output
    assert "**holds**" not in markdown and "**inconclusive**" in markdown
    assert "the same on every seed" in markdown
    assert "sequential one-sided p 1 that it holds, 1 that it does not" in markdown
    assert "[-∞, ∞]" in markdown  # no interval sized on no spread


@pytest.mark.parametrize("value", [math.inf, -math.inf, 1e200])
def test_every_overflowing_value_is_named_and_never_computed_on(value):
    from test_decisions import _frame, _study

    claim = {**BELOW, "at": [32]}
    values = {"DAPE-Kerple": [40.0, value, 41.0], "DAPE1x3-Kerple": [90.0, 91.0, 92.0]}
    (result,) = evaluate_claims(_study([claim]), _frame(values))
    assert result.verdict == "inconclusive" and not result.tested and not result.needs_seeds
    assert result.unusable == [f"DAPE-Kerple · s1 ppl_32 {describe(value)}"]
    (sequential,) = evaluate_claims(_study([claim], decide={}), _frame(values))
    assert sequential.unusable and not sequential.needs_seeds and not sequential.decided


def test_a_claim_keeps_the_verdict_of_its_stopping_look_and_shows_later_seeds_beside_it():
    """`first` holds at the first look (2 seeds); its rows then train to 10 seeds for `other` (undecided),
    and on those later seeds the variant is above: judged afresh at 10 seeds it would read otherwise. The report's
    verdict is the one `run --decide` stopped at, with the later seeds shown beside it."""
    import pandas as pd
    from test_decisions import _study

    rng = np.random.default_rng(3)
    first = {**BELOW, "id": "first", "at": [32]}
    other = {**BELOW, "id": "other", "at": [64]}
    rows = []
    for seed in range(10):
        base = 40.0 + rng.normal(0, 1)
        shift = -1.0 - 0.001 * seed if seed < 2 else 1.0 + rng.normal(0, 0.05)
        rows += [{"label": "DAPE-Kerple", "seed": seed, "status": "FINISHED", "ppl_32": base,
                  "ppl_64": base + rng.normal(0, 1)},
                 {"label": "DAPE1x3-Kerple", "seed": seed, "status": "FINISHED", "ppl_32": base + shift,
                  "ppl_64": base + rng.normal(0, 1)}]
    frame = pd.DataFrame(rows)
    study = _study([first, other], decide={"min_seeds": 2, "max_seeds": 10, "batch": 2})
    judged, still = evaluate_claims(study, frame)
    assert judged.verdict == "holds" and judged.seeds == 2 and judged.looks == (2,), judged.reason
    assert judged.later is not None and judged.later.seeds == 10
    assert judged.later.deciding.evidence.effect > 0  # the later seeds point the other way ...
    assert "cannot reopen the verdict" in judged.reason  # ... and are shown, not judged
    assert still.verdict == "inconclusive" and still.seeds == 10
    at_two = evaluate_claims(study, frame[frame["seed"] < 2])[0]  # what the loop saw at its first look
    assert (at_two.verdict, at_two.p) == (judged.verdict, judged.p)


# --- one design per sequence of looks (orchestrator/judging/design.py) ---------------------------------------------
def test_resuming_with_another_design_is_refused_naming_both(tmp_path, capsys):
    from orchestrator.judging.design import record
    from orchestrator.study.model import Decide
    from orchestrator.tracking.store import StudyStore

    path, uri = _store(tmp_path, decide={"max_seeds": 12})
    store = StudyStore.open(uri, "tiny_report")
    store.parent_run_id = store._find_parent()
    record(store, Decide())  # the sequence ran with the defaults: looks at 2, 4, 6, 8, 10
    code, output = run_cli(capsys, "run", path, "--local", "--tracking-uri", uri, "--reports-dir", tmp_path / "r")
    assert code == 2, output
    assert "was run with looks at 2, 4, 6, 8, 10 seeds, alpha 0.05" in output
    assert "this run asks for looks at 2, 4, 6, 8, 10, 12 seeds, alpha 0.05" in output
    assert "--new-sequence" in output and "Nothing was run" in output
    assert len(store.trial_runs()) == 6  # the synthetic trials: no new one started


def test_new_sequence_without_deciding_is_refused(tmp_path, capsys):
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({**report_study.STUDY, "expect": [BELOW]}))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code, output = run_cli(capsys, "run", path, "--local", "--new-sequence", "--tracking-uri", uri)
    assert code == 2 and "give --decide too" in " ".join(output.split()) and "Nothing was run" in output, output
    assert not (tmp_path / "mlflow.db").exists()  # nothing launched, no store created


def test_a_store_from_before_designs_were_recorded_is_checked_against_its_looks_file(tmp_path, capsys):
    import json

    from orchestrator.decide_loop import LOOKS_FILE
    from orchestrator.tracking.store import StudyStore

    path, uri = _store(tmp_path, decide={"alpha": 0.01})
    store = StudyStore.open(uri, "tiny_report")
    store.parent_run_id = store._find_parent()
    store.log_parent_text(json.dumps({"decide": {"min_seeds": 2, "max_seeds": 10, "batch": 2, "alpha": 0.05},
                                      "looks": [], "claims": []}), LOOKS_FILE)
    code, output = run_cli(capsys, "run", path, "--local", "--tracking-uri", uri, "--reports-dir", tmp_path / "r")
    assert code == 2, output
    assert "alpha 0.05 (looks.json (the store was written before designs were recorded" in output
    assert "this run asks for looks at 2, 4, 6, 8, 10 seeds, alpha 0.01" in output


def test_a_new_sequence_is_stated_and_the_report_judges_with_the_recorded_design(tmp_path, capsys):
    from orchestrator.judging.design import check, record
    from orchestrator.study.model import Decide
    from orchestrator.tracking.store import StudyStore

    path, uri = _store(tmp_path)  # the study file has no decide: section
    store = StudyStore.open(uri, "tiny_report")
    store.parent_run_id = store._find_parent()
    record(store, Decide())
    lines, note = check(store, Decide(max_seeds=4), new_sequence=True)
    assert lines == [note] and "replacing looks at 2, 4, 6, 8, 10 seeds" in note
    record(store, Decide(max_seeds=4), note)
    code, output, markdown = _report(capsys, tmp_path, path, uri)
    assert code == 0, output
    assert "A new sequence of looks was started" in markdown
    assert "The claims are judged with the design recorded on the study's run: looks at 2, 4 seeds" in markdown
    assert "looks [2]" in markdown or "over 2 seeds" in markdown  # judged at the design's looks, not at 3 seeds


def test_a_reason_never_contradicts_its_verdict_and_the_two_p_values_are_told_apart():
    from test_decisions import _frame, _pair, _study

    from orchestrator.reporting.render_claims import intro

    (result,) = evaluate_claims(_study([{**BELOW, "at": [32]}]), _frame(_pair(0.99, 0.3, 3, np.random.default_rng(1))))
    assert result.verdict == "inconclusive", result.reason
    assert result.reason.startswith("not significant: the evidence so far leans to")
    assert "does not decide it" in result.reason and not result.reason.startswith(("holds", "fails"))
    text = intro([result])
    assert "A claim's p is not the significance table's" in text and "not a verdict" in text
    assert "upper estimate" in text


@pytest.mark.slow
def test_run_decide_names_a_failed_seed_and_trains_no_seed_that_cannot_change_the_claim(tmp_path, capsys):
    """The first look's trials are in the store (synthetic, so `run` skips them by identity), the baseline's
    seed 1 with a NaN evaluation: the claim cannot be decided by more seeds, so no look trains anything."""
    path, uri = _store(tmp_path, {("DAPE-Kerple", 1): math.nan}, seeds=(0, 1), decide={"max_seeds": 6})
    code, output = run_cli(capsys, "run", path, "--decide", "--local", "--tracking-uri", uri, "--reports-dir",
                           tmp_path / "reports")
    assert code == 0, output
    assert "Look 2" not in output  # nothing more trained: more seeds cannot change the claim
    assert "below: undecided: waiting on something seeds do not give" in output
    assert "DAPE-Kerple · s1 ppl_64 has no value (NaN: a failed evaluation" in output
    assert "Decision design: looks at 2, 4, 6 seeds, alpha 0.05 (recorded" in output
    store = MlflowClient(uri)
    experiment = store.get_experiment_by_name("tiny_report")
    assert len(store.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'trial'")) == 4
    parent = store.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'study'")[0]
    assert parent.data.tags["decide.design"] == '{"alpha": 0.05, "batch": 2, "max_seeds": 6, "min_seeds": 2}'
    # plan's expected and ceiling trials, recorded before the first look, against the trials used
    assert parent.data.tags["decide.planned_trials"] == "8,12" and "ceiling 12); used 4" in output


# --- the design lock covers `report` and the seeds (issue 51, item 5) ----------------------------------------------
def _recorded(tmp_path, **changes):
    """A synthetic store at seeds 0, 1, 2 whose sequence of looks ran with the default design on those seeds
    (recorded on the study's run, as `run --decide` records it); the study file, then, as `changes` edit it."""
    from orchestrator.judging.design import record
    from orchestrator.study.model import Decide
    from orchestrator.tracking.store import StudyStore

    path, uri = _store(tmp_path)
    store = StudyStore.open(uri, "tiny_report")
    store.parent_run_id = store._find_parent()
    record(store, Decide(), order=Decide().seed_order([0, 1, 2]))
    spec = yaml.safe_load(path.read_text())
    spec.update(changes)
    path.write_text(yaml.safe_dump(spec))
    return path, uri, store


def _report_args(tmp_path, path, uri, *flags):
    return ("report", path, "--tracking-uri", uri, "--reports-dir", tmp_path / "reports", *flags)


def test_report_with_an_edited_decide_section_is_refused_naming_both_or_judged_as_a_new_sequence(tmp_path, capsys):
    path, uri, store = _recorded(tmp_path, decide={"max_seeds": 4})
    code, output = run_cli(capsys, *_report_args(tmp_path, path, uri))
    text = " ".join(output.split())
    assert code == 2, output
    assert "run with looks at 2, 4, 6, 8, 10 seeds, alpha 0.05 on seeds 0, 1, 2, 3, ..." in text
    assert "decide: section now ask for looks at 2, 4 seeds, alpha 0.05" in text
    assert "--new-sequence" in text and "Nothing was written" in text
    assert not list((tmp_path / "reports").glob("**/report.md"))  # refused before anything was judged
    code, output = run_cli(capsys, *_report_args(tmp_path, path, uri, "--new-sequence", "--attach"))
    assert code == 2 and "not attached over them" in " ".join(output.split()), output
    assert not any(key.startswith("claim.") for key in store.reader.runs(store.experiment_id, "orchestrator.role",
                                                                         "study")[0].data.tags)
    code, output = run_cli(capsys, *_report_args(tmp_path, path, uri, "--new-sequence"))
    assert code == 0, output
    markdown = next((tmp_path / "reports").glob("**/report.md")).read_text()
    assert "Judged as a new sequence (report --new-sequence): looks at 2, 4 seeds, alpha 0.05" in markdown
    assert "not the sequence the claims were decided by (looks at 2, 4, 6, 8, 10 seeds" in markdown


def test_report_and_run_with_other_seeds_are_refused_or_stated_as_a_new_sequence(tmp_path, capsys):
    path, uri, store = _recorded(tmp_path, seeds=[100])
    code, output = run_cli(capsys, *_report_args(tmp_path, path, uri))
    text = " ".join(output.split())
    assert code == 2, output
    assert "on seeds 0, 1, 2, 3, ..." in text and "seeds: now ask for" in text
    assert "on seeds 100, 101, 102, 103, ..." in text
    # run --decide (the study's design as recorded, its seeds changed): refused before a trial runs
    spec = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**spec, "decide": {}}))
    code, output = run_cli(capsys, "run", path, "--local", "--tracking-uri", uri, "--reports-dir", tmp_path / "r")
    text = " ".join(output.split())
    assert code == 2, output
    assert "read seeds 0, 1, 2, 3, ... in that order" in text and "now give 100, 101, 102, 103, ..." in text
    assert "--new-sequence" in text and "Nothing was run" in text
    assert len(store.trial_runs()) == 6  # the synthetic trials: no new one started
    # the same seeds as recorded: the report judges them without a word about a new sequence
    path.write_text(yaml.safe_dump({**spec, "seeds": [0, 1, 2]}))
    code, output = run_cli(capsys, *_report_args(tmp_path, path, uri))
    assert code == 0 and "new sequence" not in output, output


def test_the_seed_order_check_is_of_the_looks_both_orders_can_take():
    from orchestrator.judging.design import _other_seeds

    assert not _other_seeds([0, 1, 2, 3], [0, 1, 2, 3, 4, 5])  # a larger max_seeds extends the same order
    assert _other_seeds([0, 1, 2, 3], [100, 101, 102, 103])
    assert not _other_seeds(None, [100, 101])  # no order recorded (a store from before): nothing to compare


# --- a verdict says how big, and a claim may say how big matters (issue 51, item 4) ----------------------------------
def test_a_tiny_real_difference_holds_without_min_effect_and_not_with_it_and_every_verdict_states_its_size(
        tmp_path, capsys):
    """A 0.07% real difference with little noise holds as "below"; with min_effect 1% it fails (significantly
    less than 1% lower); a 4.6% difference holds with it. The claims line and the report give each decided
    claim's effect relative to B, with its interval."""
    values = {("DAPE-Kerple", seed): 40.0 + 0.01 * seed for seed in (0, 1, 2)}
    values.update({("DAPE1x3-Kerple", seed): 0.9993 * (40.0 + 0.01 * seed) + 0.0004 * (seed == 1)
                   for seed in (0, 1, 2)})
    claims = [{**BELOW, "id": "plain"}, {**BELOW, "id": "at_least_1pct", "min_effect": 0.01}]
    path, uri = _store(tmp_path, values, claims=claims)
    code, output = run_cli(capsys, "report", path, "--tracking-uri", uri, "--reports-dir", tmp_path / "reports")
    assert code == 0, output
    lines = {line.split()[0]: line for line in output.splitlines() if line.startswith("  ")}
    assert lines["plain"].startswith("  plain holds: -0.0278") and "(0.070% lower)" in lines["plain"], lines
    assert lines["at_least_1pct"].startswith("  at_least_1pct fails: 0.070% lower [0.0"), lines
    assert lines["at_least_1pct"].endswith(", claimed over 1.0% lower"), lines
    markdown = next((tmp_path / "reports").glob("**/report.md")).read_text()
    row = next(line for line in markdown.splitlines() if line.startswith("| at_least_1pct"))
    assert "0.070% lower [0.0" in row and "claimed over 1.0% lower (geometric-mean ratio 0.9993 [" in row


@pytest.mark.parametrize("bad, message", [
    ({"min_effect": -0.01}, "greater than 0"), ({"min_effect": 1.0}, "less than 1"),
    ({"min_effect": 0.01, "ratio": 0.95}, "not ratio and min_effect"),
    ({"min_effect": 0.01, "within": 0.05}, "not within and min_effect"),
    ({"min_effect": 0.01, "direction": None, "within": None}, "min_effect needs a 'direction'")])
def test_a_min_effect_that_makes_no_sense_is_refused(bad, message):
    from orchestrator.study import StudyError

    spec = {**report_study.STUDY, "expect": [{**BELOW, **bad}]}
    with pytest.raises(StudyError) as error:
        parse_study(spec)
    assert message in str(error.value) and "expect" in str(error.value), str(error.value)

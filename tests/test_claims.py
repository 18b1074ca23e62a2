"""Claims (a study's `expect:` section): validated against the study's rows before anything runs, and judged
by the report on a real tiny study (2 rows x 3 seeds through Ray Tune into MLflow, shared with test_report):
one claim that holds, one that fails, one inconclusive (min_seeds above the seeds run), one on a row that
never ran; their verdicts on the parent run; --strict-claims' exit code; trials go to Tune longest-first;
`plan` quotes the measured ms/step of matching finished runs."""

import math
import re
import statistics

import numpy as np
import pytest
import report_study
import yaml
from mlflow.tracking import MlflowClient
from scipy import stats
from typer.testing import CliRunner

from orchestrator import StudyError, expand, load_study, parse_study
from orchestrator.cli import EXIT_CLAIMS_FAILED, app
from orchestrator.planning.learned import MeasuredSteps, load_measured, shape_key
from orchestrator.planning.plan_view import plan_rows
from orchestrator.planning.schedule import estimated_seconds, longest_first
from orchestrator.reporting import build_report, load_results
from orchestrator.run_context import RunContext
from orchestrator.tracking.params import flatten
from orchestrator.tracking.store import StudyStore

HOLDS = {"id": "dape_flat_to_4x", "kind": "length_ratio", "source": "test", "variant": "DAPE-Kerple",
         "metric": "ppl", "at": "4x", "over": "1x", "at_most": 1.5}
FAILS = {"id": "dape1x3_tenfold_lower", "kind": "compare", "source": "test", "variant": "DAPE1x3-Kerple",
         "than": "baseline", "direction": "below", "ratio": 0.1, "metric": "ppl", "at": [32]}
TOO_FEW_SEEDS = {**HOLDS, "id": "needs_four_seeds", "min_seeds": 4}


def _study(claims: list[dict], **changes) -> dict:
    spec = yaml.safe_load(yaml.safe_dump(report_study.STUDY))
    spec.update(changes)
    spec["expect"] = claims
    return spec


# --- validation: before anything runs -------------------------------------------------------------------------
@pytest.mark.parametrize("claim, fragment", [
    ({**FAILS, "variant": "DAPE9x9"}, "expect[0] (dape1x3_tenfold_lower): 'DAPE9x9' is not a variant or row"),
    ({**FAILS, "than": "Alibi"}, "'Alibi' is not a variant or row of this study"),
    ({**FAILS, "metric": "perplexity"}, "unknown metric"),
    ({**FAILS, "at": [1000]}, "length 1000 (= 1000) is not evaluated for 'DAPE1x3-Kerple'"),
    ({**HOLDS, "at": "16x"}, "length '16x' (= 512) is not evaluated"),
    ({**FAILS, "at": None}, "metric 'ppl' is logged per length: give 'at'"),
    ({**FAILS, "where": {"model.pos_encoding": "rope"}},
     "where: no row of 'DAPE1x3-Kerple' has model.pos_encoding = 'rope'"),
    ({**FAILS, "where": {"model.colour": 1}}, "where: 'model.colour' is not a config key"),
    ({**HOLDS, "at_least": 2.0}, "give exactly one of 'at_least' and 'at_most'"),
    ({**FAILS, "kind": "sideways"}, "expect[0] (dape1x3_tenfold_lower): "),
])
def test_a_bad_claim_is_a_study_error_with_its_field_path(claim, fragment):
    with pytest.raises(StudyError) as error:
        parse_study(_study([claim]))
    assert fragment in str(error.value)


def test_every_bad_claim_is_reported_at_once():
    claims = [{**FAILS, "id": "a", "variant": "nope"}, {**HOLDS, "id": "b", "metric": "bleu"}, {**HOLDS, "id": "b"}]
    with pytest.raises(StudyError) as error:
        parse_study(_study(claims))
    text = str(error.value)
    assert "expect[0] (a)" in text and "expect[1] (b): unknown metric 'bleu'" in text
    assert "expect[1].id: 'b' names more than one claim" in text


def test_grid_rows_are_addressed_by_variant_and_where():
    study = load_study("studies/position_encoding.yaml")
    from orchestrator.study.claim_checks import claim_checks

    rope = next(c for c in study.expect if c.id == "rope_blows_up")
    (check,) = claim_checks(study, rope)
    assert check.left.label == "plain (pos_encoding=rope)"
    assert check.left.column == "ppl_256" and check.left.over == "ppl_32"
    dape = next(c for c in study.expect if c.id == "dape_lowers_every_encoding")
    pairs = {(c.left.label, c.right.label) for c in claim_checks(study, dape)}
    # each with its own baseline, at the encodings its `where` names (not RoPE: DAPE V2 says DAPE-RoPE does not gain)
    assert ("DAPE (pos_encoding=fire)", "plain (pos_encoding=fire)") in pairs and len(pairs) == 4


# --- verdicts on a real study ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def built(tmp_path_factory, local_ray):
    return report_study.build(tmp_path_factory.getbasetemp() / "tiny_report_study")


@pytest.fixture(scope="module")
def judged(built, tmp_path_factory):
    """The stored study reported with four claims (claims are judged at report time: nothing is retrained);
    a third row that never ran makes the fourth inconclusive."""
    never_ran = {"id": "on_a_missing_row", "kind": "compare", "source": "test", "variant": "DAPE1x5-Kerple",
                 "direction": "below", "metric": "ppl", "at": [32]}
    spec = _study([HOLDS, FAILS, TOO_FEW_SEEDS, never_ran])
    spec["variants"].append({"label": "DAPE1x5-Kerple", "set": {"model.kernel_size": 5}})
    study = parse_study(spec)
    store = StudyStore.open(built.tracking_uri, study.name)
    report = build_report(RunContext.of(study, store), tmp_path_factory.mktemp("claims_report"))
    return study, report, {result.claim.id: result for result in report.claims}


@pytest.mark.slow
def test_verdicts_hold_fail_and_inconclusive(judged):
    _, _, results = judged
    assert results["dape_flat_to_4x"].verdict == "holds"
    assert results["dape1x3_tenfold_lower"].verdict == "fails"
    assert results["needs_four_seeds"].verdict == "inconclusive"
    assert "needs min_seeds = 4" in results["needs_four_seeds"].reason
    missing = results["on_a_missing_row"]
    assert missing.verdict == "inconclusive" and "DAPE1x5-Kerple · s0 MISSING" in missing.reason


@pytest.mark.slow
def test_the_paired_test_and_holm_match_scipy(judged, built):
    """One look at 3 seeds (no `decide:`): each claim's p is scipy's two-sided t-test of its check (on the log
    scale: a bound and a ratio of perplexities), its effect and interval scipy's mean and t-interval
    (exponentiated: a geometric mean), and Holm runs over the two claims that have a test."""
    _, _, results = judged
    frame = load_results(built.study, built.tracking_uri)
    rows = frame[frame.label == "DAPE-Kerple"].set_index("seed").sort_index()
    logs = np.log((rows["ppl_128"] / rows["ppl_32"]).to_numpy())
    holds = results["dape_flat_to_4x"]
    assert holds.seeds == 3 and holds.p == pytest.approx(stats.ttest_1samp(logs, math.log(1.5)).pvalue, rel=1e-6)
    effect = holds.deciding.evidence
    assert effect.kind == "value" and effect.log and effect.effect == pytest.approx(math.exp(logs.mean()))
    interval = stats.t.interval(0.95, 2, loc=logs.mean(), scale=stats.sem(logs))
    assert (effect.low, effect.high) == pytest.approx(tuple(np.exp(interval)), rel=1e-6)
    one_x3 = frame[frame.label == "DAPE1x3-Kerple"].set_index("seed").sort_index()["ppl_32"].to_numpy()
    one_x1 = rows["ppl_32"].to_numpy()
    fails = results["dape1x3_tenfold_lower"]
    assert fails.p == pytest.approx(stats.ttest_1samp(np.log(one_x3) - np.log(one_x1), math.log(0.1)).pvalue,
                                    rel=1e-6)
    assert fails.deciding.evidence.kind == "ratio" and fails.deciding.evidence.low > 0.1  # wholly above 0.1
    # Holm over the two tested claims: the smaller p doubled, the larger one at least that.
    smaller, larger = sorted([holds.p, fails.p])
    assert min(holds.p_holm, fails.p_holm) == pytest.approx(min(1.0, 2 * smaller))
    assert max(holds.p_holm, fails.p_holm) == pytest.approx(max(min(1.0, 2 * smaller), larger))
    assert math.isnan(results["needs_four_seeds"].p_holm)


@pytest.mark.slow
def test_claims_section_follows_the_headline_table_with_measured_values(judged):
    _, report, results = judged
    text = report.markdown
    # Table 1, the claims one line each, Table 2, then each claim's checks after the tables
    order = [text.index(heading) for heading in ("## Perplexity", "## Claims", "## ΔP", "## Claims in detail")]
    assert order == sorted(order)
    # One line per claim: verdict, effect with its interval and the claimed side, seeds, source.
    assert re.search(r"\| dape_flat_to_4x\s.*\| \*\*holds\*\*\s*\| geometric-mean value [0-9.]+ \[[0-9.]+, [0-9.]+\], "
                     r"claimed < 1\.5\s*\| 3\s*\| test\s*\|", text)
    ratio = results["dape_flat_to_4x"].checks[0]
    assert ratio.holds and ratio.text.startswith("DAPE-Kerple: ppl_128/ppl_32 = ")
    html = (report.folder / "report.html").read_text()
    assert html.index('id="table-perplexity"') < html.index('id="claims"') < html.index('id="table-delta_p"')
    assert '<tr class="claim-fails">' in html
    assert html.index('id="table-perplexity"') < html.index('id="claim-details"')
    assert '<details class="claim-holds"><summary>dape_flat_to_4x: holds, geometric-mean value ' in html


@pytest.mark.slow
def test_verdicts_are_tags_and_metrics_of_the_parent_run(judged, built):
    study, _, _ = judged
    client = MlflowClient(built.tracking_uri)
    parent = client.get_run(StudyStore.open(built.tracking_uri, study.name).parent_run_id)
    assert parent.data.tags["claim.dape_flat_to_4x"] == "holds"
    assert parent.data.tags["claim.dape1x3_tenfold_lower"] == "fails"
    assert parent.data.tags["claim.needs_four_seeds"] == "inconclusive"
    assert parent.data.metrics["claims_holding"] == 1 and parent.data.metrics["claims_failing"] == 1
    assert parent.data.metrics["claims_inconclusive"] == 2
    assert "claim.dape_flat_to_4x.p_holm" in parent.data.metrics
    assert parent.data.metrics["claim.dape_flat_to_4x.seeds"] == 3
    low, high = (parent.data.metrics[f"claim.dape_flat_to_4x.effect_{end}"] for end in ("low", "high"))
    assert low < parent.data.metrics["claim.dape_flat_to_4x.effect"] < high < 1.5
    assert parent.data.tags["claim.dape_flat_to_4x.effect"].startswith("geometric-mean value ")


@pytest.mark.slow
def test_a_verdict_on_one_seed_never_reads_like_a_tested_one(judged, built):
    """The stored 3-seed study judged on its seed 0 alone: the same claims hold and fail on the means, but
    every word says no test ran, in the report's table, its details, the command line's count and the tag."""
    from orchestrator.judging.claims import decision_summary, evaluate_claims, mlflow_record
    from orchestrator.reporting import render_claims

    study, _, tested = judged
    frame = load_results(built.study, built.tracking_uri)
    results = {r.claim.id: r for r in evaluate_claims(study, frame[frame["seed"] == 0])}
    one = results["dape_flat_to_4x"]
    assert one.verdict == "holds" and not one.tested and math.isnan(one.p_holm)
    assert one.words == "holds on 1 seed, untested" and "may be seed noise" in one.reason
    assert results["dape1x3_tenfold_lower"].words == "fails on 1 seed, untested"
    assert tested["dape_flat_to_4x"].words == "holds" and tested["dape_flat_to_4x"].tested  # 3 seeds, tested
    claims = list(results.values())
    assert decision_summary(claims) == ("0 of 4 claims decided (0 hold, 0 fail); 2 undecided; 2 on 1 seed, untested "
                                        "(1 holds, 1 fails on the means)")
    assert decision_summary(list(tested.values())) == "2 of 4 claims decided (1 holds, 1 fails); 2 undecided"
    text = "\n".join(render_claims.markdown(claims))
    assert "*holds on 1 seed, untested*" in text and "**holds**" not in text
    assert re.search(r"\|\s*no interval on 1 seed\s*\|", text)
    details = "\n".join(render_claims.details_markdown(claims, "Claims in detail"))
    assert "**dape_flat_to_4x** (*holds on 1 seed, untested*, test):" in details and "**holds**" not in details
    assert '<tr class="claim-untested">' in render_claims.html(claims)  # never the colour of a pass
    assert "claim-holds" not in render_claims.html(claims)
    tags, metrics = mlflow_record(claims)
    assert tags["claim.dape_flat_to_4x"] == "holds on 1 seed, untested"
    assert (metrics["claims_holding"], metrics["claims_holding_untested"], metrics["claims_failing"],
            metrics["claims_failing_untested"]) == (0, 1, 0, 1)


@pytest.mark.slow
def test_strict_claims_sets_the_exit_code(built, tmp_path):
    study_file = tmp_path / "tiny_report.yaml"
    runner = CliRunner()
    study_file.write_text(yaml.safe_dump(_study([HOLDS, FAILS])))
    common = ["--tracking-uri", built.tracking_uri, "--reports-dir", str(tmp_path / "reports")]
    lenient = runner.invoke(app, ["report", str(study_file), *common])
    assert lenient.exit_code == 0, lenient.output
    # 3 seeds: both verdicts tested, and the cost of deciding them (the study's 6 trials).
    assert "Claims: 2 of 2 claims decided (1 holds, 1 fails) on 6 trials" in lenient.output
    strict = runner.invoke(app, ["report", str(study_file), *common, "--strict-claims"])
    assert strict.exit_code == EXIT_CLAIMS_FAILED == 4 and "dape1x3_tenfold_lower" in strict.output
    # `run` on the finished study reruns nothing, reports, and exits by the same rule.
    run = runner.invoke(app, ["run", str(study_file), *common, "--storage-dir", str(tmp_path / "state"),
                              "--strict-claims"])
    assert run.exit_code == 4, run.output
    # An inconclusive claim is not a failure.
    study_file.write_text(yaml.safe_dump(_study([HOLDS, TOO_FEW_SEEDS])))
    assert runner.invoke(app, ["report", str(study_file), *common, "--strict-claims"]).exit_code == 0


# --- scheduling and learned estimates -------------------------------------------------------------------------
def test_trials_are_ordered_longest_first_by_their_estimate():
    study = load_study("studies/kernel_size.yaml")
    ordered = longest_first(expand(study), study)
    assert [t.label for t in ordered] == ["DAPE1x7-Kerple", "DAPE1x5-Kerple", "DAPE1x3-Kerple", "DAPE-Kerple", "Kerple"]
    seconds = [estimated_seconds(t, study) for t in ordered]
    assert seconds == sorted(seconds, reverse=True)


def test_measured_durations_override_the_analytic_order():
    """Where the store has measured a shape, its ms/step orders the trials: a DAPE-Kerple step measured 4x
    a 1x7 step puts DAPE-Kerple first, though its FLOPs are the fewest of the processors."""
    study = load_study("studies/kernel_size.yaml")
    trials = expand(study)
    measured = MeasuredSteps()
    for trial, ms in zip(trials, [100.0, 400.0, 110.0, 120.0, 130.0]):  # Kerple, DAPE, 1x3, 1x5, 1x7
        measured.add(shape_key(flatten(trial.config), "cpu"), f"run-{trial.label}", ms)
    assert [t.label for t in trials] == ["Kerple", "DAPE-Kerple", "DAPE1x3-Kerple", "DAPE1x5-Kerple", "DAPE1x7-Kerple"]
    ordered = longest_first(trials, study, measured)
    assert [t.label for t in ordered] == ["DAPE-Kerple", "DAPE1x7-Kerple", "DAPE1x5-Kerple", "DAPE1x3-Kerple", "Kerple"]


@pytest.mark.slow
def test_tune_starts_the_longest_trials_first(built):
    """In the real study the 1x3 trials (the costlier) were handed to Tune first: the first two runs it
    started (2 slots) are 1x3 runs, and every 1x3 run started before the last 1x1 run."""
    client = MlflowClient(built.tracking_uri)
    experiment = client.get_experiment_by_name("tiny_report")
    runs = sorted(client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'trial'"),
                  key=lambda r: r.info.start_time)
    labels = [r.data.tags["label"] for r in runs]
    assert labels[:2] == ["DAPE1x3-Kerple", "DAPE1x3-Kerple"], labels


@pytest.mark.slow
def test_plan_quotes_measured_ms_per_step_of_matching_runs(built, tmp_path):
    measured = load_measured(built.tracking_uri)
    study = parse_study(_study([], name="tiny_plan"))
    rows = {row.name: row for row in plan_rows(study, measured, set())}
    client = MlflowClient(built.tracking_uri)
    experiment = client.get_experiment_by_name("tiny_report")
    for trial in expand(study):
        same = client.search_runs([experiment.experiment_id], f"tags.label = '{trial.label}'")
        ms = statistics.median(r.data.metrics["ms_per_step"] for r in same)
        row = rows[trial.run_name]
        assert row.basis == "measured (3 runs)"
        assert row.seconds == pytest.approx(ms * trial.config["train"]["steps"] / 1000)
    # Another learning rate or step count trains the same shape: still measured; another width is not.
    base = report_study.STUDY["base"]
    longer = parse_study(_study([], name="tiny_plan",
                                base={**base, "train": {**base["train"], "lr": 3e-3, "steps": 300}}))
    assert all(r.basis.startswith("measured") for r in plan_rows(longer, measured, set()))
    wider = parse_study(_study([], name="tiny_plan", base={**base, "model": {**base["model"], "d_dape": 16}}))
    assert all(r.basis == "analytic" for r in plan_rows(wider, measured, set()))
    key = shape_key(flatten(expand(study)[0].config), "cpu")
    assert measured.lookup(key) is not None and measured.lookup(key, exclude_run="nope")[1] == 3
    result = CliRunner().invoke(app, ["plan", str(built.study_file), "--tracking-uri", built.tracking_uri,
                                      "--explain"])  # the notes that say how each column is estimated
    assert result.exit_code == 0 and "measured (3 runs)" in result.output
    assert "peak_memory_mb" in result.output and "GFLOP/s per CPU core" in result.output


def test_plan_shows_a_search_as_its_samples(tmp_path):
    result = CliRunner().invoke(app, ["plan", "studies/search.yaml", "--tracking-uri", f"sqlite:///{tmp_path}/none.db"])
    assert result.exit_code == 0, result.output
    assert "sample 9/9" in result.output and "one row per sample (9)" in result.output


# --- the shipped claims say what their text says ----------------------------------------------------------------
def _frame(values: dict[str, dict[str, float]], seeds=(0,)):
    """Finished trials with the given metric values (label -> column -> value), one row per seed."""
    import pandas as pd

    return pd.DataFrame([{"label": label, "seed": seed, "status": "FINISHED", **columns}
                         for label, columns in values.items() for seed in seeds])


def _judge(study_file: str, claim_id: str, values: dict, seeds=(0,)):
    from orchestrator.judging.claims import evaluate_claims

    study = load_study(study_file)
    return next(r for r in evaluate_claims(study, _frame(values, seeds)) if r.claim.id == claim_id)


@pytest.mark.parametrize("ppl_1x7, verdict", [
    (5.778, "holds"),  # the README's run: 3.7% below 1x3's 5.999
    (6.300, "fails"),  # 1x7 worse than 1x3: not "below 1x3's" (the claim's earlier check, ratio 0.95 above, held)
    (5.500, "fails"),  # 8% below: more than "little"
])
def test_wider_adds_little_checks_what_its_text_says(ppl_1x7, verdict):
    result = _judge("studies/kernel_size.yaml", "wider_adds_little",
                    {"DAPE1x3-Kerple": {"ppl_512": 5.999}, "DAPE1x7-Kerple": {"ppl_512": ppl_1x7}})
    assert "below 1x3's, by less than 5%" in result.claim.text
    assert result.verdict == verdict and len(result.checks) == 2


def test_a_band_claim_without_direction_bounds_both_sides():
    spec = _study([{"id": "close", "kind": "compare", "source": "test", "variant": "DAPE1x3-Kerple", "within": 0.1,
                    "metric": "ppl", "at": [32]}])
    from orchestrator.study.claim_checks import claim_checks

    study = parse_study(spec)
    checks = claim_checks(study, study.expect[0])
    assert [(c.relation, c.scale) for c in checks] == [(">", 0.9), ("<", 1.1)]
    with pytest.raises(StudyError, match="give 'direction'"):
        parse_study(_study([{**FAILS, "direction": None}]))
    with pytest.raises(StudyError, match="not ratio and within"):
        parse_study(_study([{**FAILS, "within": 0.05}]))


PAPER_MS = {"plain": 189.91, "DAPE": 224.22, "DAPE1x3": 252.84}  # DAPE V2's time-cost table, 350M on a GPU


def _time_cost_values(ms: dict[str, float], column: str = "ms_per_step") -> dict:
    return {f"{variant} (pos_encoding={encoding})": {column: value} for variant, value in ms.items()
            for encoding in ("kerple", "rope", "alibi")}


def test_the_time_cost_claims_are_the_papers_finding_a_cost_of_at_most_about_that():
    for claim_id in ("dape_step_cost", "dape1x3_step_cost"):
        # The paper's own figures satisfy its finding ...
        assert _judge("studies/time_cost.yaml", claim_id, _time_cost_values(PAPER_MS)).verdict == "holds"
        # ... and a slower processor, as on this CPU (1.6-1.9x), fails it, saying by how much.
        slow = _judge("studies/time_cost.yaml", claim_id, _time_cost_values({"plain": 30.0, "DAPE": 51.0,
                                                                               "DAPE1x3": 57.0}))
        assert slow.verdict == "fails" and slow.words == "fails on 1 seed, untested"
        assert "measured ratio 1.7" in slow.reason or "measured ratio 1.9" in slow.reason, slow.reason


def test_timing_claims_prefer_isolated_timings_where_every_trial_has_them():
    contended = _time_cost_values({"plain": 30.0, "DAPE": 51.0, "DAPE1x3": 57.0})
    isolated = _time_cost_values(PAPER_MS, "isolated_ms_per_step")
    both = {label: {**contended[label], **isolated[label]} for label in contended}
    result = _judge("studies/time_cost.yaml", "dape_step_cost", both)
    assert result.verdict == "holds" and "(isolated timing)" in result.checks[0].text
    # One side without its isolated timing: both sides from the training's timings, never one of each.
    del both["plain (pos_encoding=kerple)"]["isolated_ms_per_step"]
    mixed = _judge("studies/time_cost.yaml", "dape_step_cost", both)
    assert mixed.verdict == "fails" and "isolated" not in mixed.checks[0].text

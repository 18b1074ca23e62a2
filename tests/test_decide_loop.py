"""`orchestrator run --decide`: seeds added a planned look at a time to the rows undecided claims read
(orchestrator/decide_loop.py); its bad input refused before anything runs; `plan`'s expected seeds and cost per
claim (orchestrator/planning/seeds_needed.py). The slow tests train tiny real studies through Ray Tune (the
session's local Ray), in-process (--local), or as a subprocess killed between two looks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from cli_support import run_cli
from mlflow.tracking import MlflowClient

from orchestrator import parse_study
from orchestrator.decide_loop import (
    DECIDED,
    LOOK_SEEDS,
    LOOKS_FILE,
    TRIAL_FAILED,
    WAITING,
    decide_and_report,
    with_decide,
)
from orchestrator.errors import UserInputError
from orchestrator.run_context import RunContext
from orchestrator.study import StudyError
from orchestrator.tracking.params import effective_params
from orchestrator.tracking.store import ROLE_TAG, TRIAL_ID_TAG, StudyStore
from orchestrator.trial.trials import expand

BASE = {
    "model": {"preset": "tiny", "pos_encoding": "alibi", "processor": "none"},
    "data": {"max_files": 300},
    "train": {"steps": 60, "batch_size": 8, "seq_len": 32, "log_every": 20},
    "eval": {"lengths": [32], "tail_tokens": 16, "n_windows": 4},
}
# 2 training steps against 60: the longer training's loss is far below on every seed (a large effect).
ROWS = [{"label": "short", "baseline": True, "set": {"train.steps": 2}}, {"label": "long", "set": {"train.steps": 60}}]
OBVIOUS = {"id": "longer_is_lower", "kind": "compare", "source": "test", "variant": "long", "direction": "below",
           "metric": "train_loss"}


def _study(name="decided", **extra) -> dict:
    return {"name": name, "base": BASE, "variants": ROWS, "resources": {"cpus": 1, "max_retries": 0},
            "keep_weights": "none", "expect": [OBVIOUS], **extra}


# --- bad input: refused with the field path, nothing run ------------------------------------------------------
def test_max_seeds_below_min_seeds_is_refused_with_its_field():
    with pytest.raises(StudyError, match=r"decide.*max_seeds \(3\) is below min_seeds \(4\)"):
        parse_study(_study(decide={"min_seeds": 4, "max_seeds": 3}))


def test_a_trial_budget_that_cannot_buy_the_minimum_is_refused():
    with pytest.raises(StudyError, match=r"decide.budget_trials: 3 trial\(s\) cannot buy the minimum: 2 row\(s\) "
                                         r"x min_seeds 2 = 4 trials"):
        parse_study(_study(decide={"budget_trials": 3}))
    assert parse_study(_study(decide={"budget_trials": 4})).decide.budget_trials == 4


def test_decide_needs_claims_and_a_grid():
    with pytest.raises(StudyError, match=r"decide: the study has no claims"):
        parse_study(_study(expect=[], decide={}))
    search = _study(decide={}, variants=[{"label": "only"}],
                    search={"algorithm": "random", "num_samples": 2,
                            "space": {"train.lr": {"type": "loguniform", "low": 1e-4, "high": 1e-3}}})
    search["expect"] = [{**OBVIOUS, "kind": "bound", "variants": ["only"], "at_most": 9.0, "direction": None}]
    search["expect"][0].pop("direction"), search["expect"][0].pop("variant")
    with pytest.raises(StudyError, match=r"decide: a random search samples its rows"):
        parse_study(search)


def test_a_gpu_hour_budget_below_the_minimum_is_refused_before_anything_runs():
    rows = [{"label": "a", "baseline": True}, {"label": "b", "set": {"train.lr": 2.0e-3}}]
    big = _study(decide={"budget_gpu_hours": 0.001}, resources={"cpus": 1, "gpus": 1}, variants=rows,
                 expect=[{**OBVIOUS, "variant": "b"}])
    big["base"] = {**BASE, "train": {**BASE["train"], "steps": 10_000_000}}  # hours of GPU time per trial
    with pytest.raises(UserInputError, match=r"decide.budget_gpu_hours: 0.001 GPU-hours cannot buy the minimum"):
        with_decide(parse_study(big), requested=False)


def test_run_decide_without_claims_exits_2_and_creates_nothing(tmp_path, capsys):
    path = tmp_path / "no_claims.yaml"
    path.write_text(yaml.safe_dump(_study(name="no_claims", expect=[])))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code, output = run_cli(capsys, "run", path, "--decide", "--local", "--tracking-uri", uri)
    assert code == 2, output
    assert "decide: the study has no claims" in output and "Nothing was run" in output
    assert not (tmp_path / "mlflow.db").exists()


def test_a_study_without_decide_runs_as_before_unless_asked():
    study = parse_study(_study())
    assert with_decide(study, requested=False) is None
    assert with_decide(study, requested=True).decide.min_seeds == 2  # the defaults


# --- plan: expected seeds and cost per claim, learned from the store ------------------------------------------
def _record_runs(uri: str, study, values: dict[str, list[float]]) -> None:
    """Finished trial runs of `study`'s rows at seeds 0, 1, 2, ... with these train_loss values (label -> values)."""
    store = StudyStore.create(uri, study.name)
    client = MlflowClient(uri)
    for label, losses in values.items():
        template = next(trial for trial in expand(study) if trial.label == label)
        for seed, loss in enumerate(losses):
            config = {**template.config, "train": {**template.config["train"], "seed": seed}}
            run = client.create_run(store.experiment_id, run_name=f"{label} · s{seed}",
                                    tags={ROLE_TAG: "trial", TRIAL_ID_TAG: f"{label}-{seed}"})
            for key, value in effective_params(config).items():
                client.log_param(run.info.run_id, key, str(value))
            client.log_metric(run.info.run_id, "train_loss", loss)
            client.set_terminated(run.info.run_id, "FINISHED")


def test_plan_shows_the_seeds_and_cost_each_claim_is_expected_to_need(tmp_path, capsys):
    rows = [*ROWS, {"label": "near", "set": {"train.steps": 61}}, {"label": "unseen", "set": {"train.steps": 62}}]
    claims = [OBVIOUS,
              {**OBVIOUS, "id": "near_is_lower", "variant": "near", "than": "long"},
              {**OBVIOUS, "id": "unseen_is_lower", "variant": "unseen"}]
    document = _study(name="planned", variants=rows, expect=claims, decide={"max_seeds": 6})
    path = tmp_path / "planned.yaml"
    path.write_text(yaml.safe_dump(document))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # short vs long: 1.0 apart, seeds spread ~0.02 (decided at the minimum); long vs near: 0.01 apart for a
    # paired spread of ~0.03 (more seeds than max_seeds); unseen: never ran (unknown, the minimum applies).
    _record_runs(uri, parse_study(document), {"short": [5.00, 5.02, 4.98], "long": [4.00, 4.03, 3.99],
                                              "near": [3.98, 4.04, 3.96]})
    code, output = run_cli(capsys, "plan", path, "--explain", "--tracking-uri", uri)
    assert code == 0, output
    lines = {line.split(":")[0].strip(): line for line in output.splitlines() if line.startswith("  ")}
    assert "longer_is_lower: expected 2 seeds; 4 trials of 2 rows" in lines["longer_is_lower"]
    assert "first look 4 trials, ceiling 12 trials" in lines["longer_is_lower"]
    assert "these rows' own seeds" in lines["longer_is_lower"]
    assert "near_is_lower: expected 6 seeds; 12 trials of 2 rows" in lines["near_is_lower"]
    assert "more than max_seeds" in lines["near_is_lower"]
    # unseen: no spread in the store, the stated default effect (2 seed SDs) at alpha / 3: 6 seeds
    assert "unseen_is_lower: expected 6 seeds by default; 12 trials" in lines["unseen_is_lower"]
    assert "a default effect of 2 seed SDs is assumed" in lines["unseen_is_lower"]
    # the whole study: every row at 2 first, every row at 6 expected (near_is_lower and unseen_is_lower read
    # them all) and at most
    assert "whole study with --decide: first look 8 trials" in output
    assert "expected 24 trials" in output and "ceiling 24 trials" in output


# --- real tiny studies ------------------------------------------------------------------------------------------
def _parent(uri: str, name: str):
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(name)
    parents = client.search_runs([experiment.experiment_id], f"tags.`{ROLE_TAG}` = 'study'") if experiment else []
    return client, parents[0] if parents else None


def _looks(uri: str, name: str) -> dict:
    client, parent = _parent(uri, name)
    return json.loads(open(client.download_artifacts(parent.info.run_id, LOOKS_FILE)).read())


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_large_effect_is_decided_at_the_minimum_seeds_and_a_failed_trial_stops_only_its_claim(tmp_path, local_ray):
    # Through Ray Tune, as `orchestrator run --decide` runs by default (the other slow tests here: --local).
    rows = [*ROWS, {"label": "diverges", "set": {"train.lr": 1.0e4}}]  # a NaN loss: its trials fail
    broken = {**OBVIOUS, "id": "diverging_is_lower", "variant": "diverges"}
    study = with_decide(parse_study(_study(variants=rows, expect=[OBVIOUS, broken], decide={"max_seeds": 4})), False)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    outcome = decide_and_report(RunContext.create(study, uri, storage_dir=tmp_path / "state"),
                                tmp_path / "reports", say=lambda line: None)
    record = _looks(uri, "decided")
    claims = {claim["id"]: claim for claim in record["claims"]}
    assert claims["longer_is_lower"]["status"] == DECIDED
    assert claims["longer_is_lower"]["seeds"] == study.decide.min_seeds
    assert claims["longer_is_lower"]["look"] == 0 and len(record["looks"]) == 1
    assert claims["diverging_is_lower"]["status"] == TRIAL_FAILED
    assert "diverges · s0" in claims["diverging_is_lower"]["reason"]
    assert outcome.trials_run == 6 and len(outcome.failed) == 2  # 3 rows x 2 seeds; the diverging ones failed
    _, parent = _parent(uri, "decided")
    assert parent.data.metrics[LOOK_SEEDS] == 2


def _start(path, cwd):
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{cwd / 'mlflow.db'}"}
    command = [sys.executable, "-m", "orchestrator", "run", str(path), "--local", "--decide"]
    return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_decide_run_killed_between_looks_resumes_without_retraining_and_decides_the_same(tmp_path):
    # long vs short is decided at the first look (2 seeds, Holm over the 2 claims); twin vs long (the same
    # training but for a learning rate 1% apart) is judged from 4 seeds on (its min_seeds), so the second look
    # trains 2 more seeds of long and twin alone, while the kill lands (as soon as the first look is recorded).
    rows = [*ROWS, {"label": "twin", "set": {"train.steps": 60, "train.lr": 1.01e-3}}]
    claims = [OBVIOUS, {**OBVIOUS, "id": "twin_is_lower", "variant": "twin", "than": "long", "min_seeds": 4}]
    document = _study(name="killed", variants=rows, expect=claims, decide={"max_seeds": 4})
    for folder in ("killed", "reference"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "killed.yaml").write_text(yaml.safe_dump(document))
    killed, reference = tmp_path / "killed", tmp_path / "reference"
    MlflowClient(f"sqlite:///{killed / 'mlflow.db'}").search_experiments()  # the schema, before the test reads it
    uri = f"sqlite:///{killed / 'mlflow.db'}"
    proc = _start(killed / "killed.yaml", killed)
    try:
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            _, parent = _parent(uri, "killed")
            if parent is not None and LOOK_SEEDS in parent.data.metrics:
                break
            assert proc.poll() is None, proc.stdout.read()
            time.sleep(0.3)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("killed")
    before = {run.info.run_id: run.data.tags[TRIAL_ID_TAG] for run in client.search_runs(
        [experiment.experiment_id], f"tags.`{ROLE_TAG}` = 'trial' and attributes.status = 'FINISHED'")}
    assert len(before) >= 6  # the first look (3 rows x 2 seeds) finished, at most part of the second
    first = _looks(uri, "killed")
    assert len(first["looks"]) == 1 and {c["id"]: c["status"] for c in first["claims"]}["twin_is_lower"] == WAITING

    resumed = _start(killed / "killed.yaml", killed)
    output = resumed.communicate(timeout=400)[0]
    assert resumed.returncode == 0, output
    runs = client.search_runs([experiment.experiment_id], f"tags.`{ROLE_TAG}` = 'trial'")
    finished = [run for run in runs if run.info.status == "FINISHED"]
    ids = [run.data.tags[TRIAL_ID_TAG] for run in finished]
    assert len(ids) == len(set(ids))  # each trial trained once
    assert set(before) <= {run.info.run_id for run in finished}  # the runs finished before the kill were reused

    run = _start(reference / "killed.yaml", reference)  # the same sequence, uninterrupted
    assert run.communicate(timeout=400)[0] is not None and run.returncode == 0
    reference_uri = f"sqlite:///{reference / 'mlflow.db'}"
    mine, theirs = _looks(uri, "killed"), _looks(reference_uri, "killed")
    def decisions(record):
        return [(c["id"], c["status"], c["verdict"], c["seeds"], c["look"]) for c in record["claims"]]

    assert decisions(mine) == decisions(theirs)
    def shape(record):
        return [(look["index"], look["seeds"], look["rows"], look["trials"], look["stopped"])
                for look in record["looks"]]

    assert shape(mine) == shape(theirs)  # the same looks (a trial resumed from its checkpoint may differ in digits)
    reference_runs = MlflowClient(reference_uri).search_runs(
        [MlflowClient(reference_uri).get_experiment_by_name("killed").experiment_id], f"tags.`{ROLE_TAG}` = 'trial'")
    assert sorted(ids) == sorted(run.data.tags[TRIAL_ID_TAG] for run in reference_runs)  # the same trials
    # The first look trains every row; the second only the rows the undecided claim reads.
    assert [look["rows"] for look in mine["looks"]] == [["short", "long", "twin"], ["long", "twin"]]
    assert len(ids) == 10  # 3 rows x 2 seeds, then long and twin x 2 more


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_report_of_a_study_run_without_decide_says_what_decide_would_add(tmp_path):
    from synthetic_store import write_store

    from orchestrator.reporting.build import build_report

    study = parse_study(_study(name="noted"))  # one seed: its claims are untested
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    report = build_report(RunContext.of(study, write_store(study, uri)), tmp_path / "reports", attach=False)
    assert ("would train about 6 more trial(s) (at most 18): 8 in all" in report.markdown
            and "a default effect of 2 seed SDs is counted" in report.markdown), report.markdown
    decided = parse_study(_study(name="noted", decide={}))
    assert "would train about" not in build_report(RunContext.of(decided, write_store(decided, uri)),
                                                   tmp_path / "other", attach=False).markdown


def test_failed_only_is_refused_with_decide(tmp_path, capsys):
    path = tmp_path / "both.yaml"
    path.write_text(yaml.safe_dump(_study(name="both")))
    code, output = run_cli(capsys, "run", path, "--decide", "--failed-only", "--local",
                           "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert code == 2 and "--failed-only" in output and "Nothing was run" in output, output
    assert not (tmp_path / "mlflow.db").exists()


def test_the_store_s_trials_of_a_decide_study_include_the_seeds_it_added_and_no_other():
    from orchestrator.trial.trials import expand_stored

    study = parse_study(_study(seeds=[5], decide={"min_seeds": 2, "max_seeds": 6}))
    every = expand(study.model_copy(update={"seeds": [5, 6, 7, 8, 9, 10]}))
    added = {trial.trial_id for trial in every if trial.label == "long" and trial.seed in (7, 8)}
    trials = expand_stored(study, added)
    assert sorted((t.label, t.seed) for t in trials) == [("long", 5), ("long", 6), ("long", 7), ("long", 8),
                                                         ("short", 5), ("short", 6)]
    assert [(t.label, t.seed) for t in expand_stored(parse_study(_study(seeds=[5])), added)] == [("short", 5),
                                                                                                ("long", 5)]

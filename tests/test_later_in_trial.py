"""A study's `report.lengths` scored by each trial itself, after its own lengths (orchestrator/run.py `run_trials`,
dape_core `run_experiment(later_lengths=...)`), so that this evaluation overlaps the other trials' training: the
values are bit for bit those `orchestrator evaluate` scores from the kept model, the trial's identity and its own
results are unchanged, `evaluate_later` finds nothing left, and a store written before (trials without those
lengths) is still completed by `evaluate_later`."""

from __future__ import annotations

import copy
import json

import pytest
from test_evaluate import BASE, VARIANTS, _runs  # the evaluate tests' tiny study and helpers

from orchestrator import expand, parse_study

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _config(kernel_size: int = 3):
    from dape_core import ExperimentConfig

    spec = {"name": "one", "base": copy.deepcopy(BASE), "variants": [{"label": "x", "baseline": True,
                                                                      "set": {"model.kernel_size": kernel_size}}]}
    return ExperimentConfig(**expand(parse_study(spec))[0].config)


def test_later_lengths_are_what_evaluate_scores_from_the_kept_model(tmp_path):
    """Bit-identical: the trial's later scores against `evaluate_stored` on its kept model (what the evaluation
    task of `evaluate_later` runs), and its own results against a run without later lengths."""
    from dape_core.experiment import evaluate_stored, run_experiment
    from dape_core.stored import load_model

    cfg = _config()
    later = run_experiment(cfg, threads=1, weights_dir=tmp_path / "model", later_lengths=[128, 96])
    plain = run_experiment(cfg, threads=1)
    assert later is not None and plain is not None and later.later is not None
    assert later.later.error is None and later.later.lengths == [96, 128]
    stored = load_model(tmp_path / "model", "cpu")
    quiet = copy.deepcopy(stored.config)
    scored = evaluate_stored(stored.model, quiet, lengths=[96, 128])
    assert later.later.perplexity == {length: scored["perplexity"][length] for length in (96, 128)}
    assert later.later.delta_p == {length: scored["delta_p"][length] for length in (96, 128)}
    metrics, own = later.metrics(), plain.metrics()
    assert metrics["ppl_128"] == scored["perplexity"][128] and metrics["delta_p_96"] == scored["delta_p"][96]
    for name in own:  # the trial's own lengths and figures: as without the later ones (timings aside)
        if name.startswith(("ppl_", "delta_p_", "train_loss")):
            assert metrics[name] == own[name], name
    assert "ppl_128" not in own


def test_a_later_length_that_cannot_be_scored_leaves_the_trial_whole(tmp_path):
    """Held-out text too short for a later length: the trial's results stand, the error is the later scores'."""
    from dape_core.experiment import run_experiment

    result = run_experiment(_config(1), threads=1, later_lengths=[10**7])
    assert result is not None and result.later is not None
    assert result.later.error and not result.later.perplexity
    assert "ppl_64" in result.metrics() and f"ppl_{10**7}" not in result.metrics()


def test_only_the_lengths_a_trial_lacks_and_that_fit_are_given_to_it():
    from orchestrator.evaluation.in_trial import later_lengths_by_trial
    from orchestrator.run_context import RunContext

    def by_trial(report: dict) -> dict:
        study = parse_study({"name": "which", "base": copy.deepcopy(BASE), "variants": VARIANTS, "report": report})
        return later_lengths_by_trial(RunContext(study=study, rows=expand(study), store=None))  # type: ignore[arg-type]

    ids = [trial.trial_id for trial in expand(parse_study({"name": "which", "base": BASE, "variants": VARIANTS}))]
    # 64 is the trials' own length, 16 below their training length: 128 is left, for every trial.
    assert by_trial({"lengths": ["2x", "4x", 16]}) == {trial_id: [128] for trial_id in ids}
    assert by_trial({"lengths": [10**6]}) == {}  # beyond this machine's memory: left to evaluate_later's refusal
    assert by_trial({"lengths": [64]}) == {}


def _spec(name: str, later: list | None) -> dict:
    spec = {"name": name, "base": copy.deepcopy(BASE), "variants": VARIANTS,
            "resources": {"cpus": 1, "max_retries": 0}}
    if later is not None:
        spec["report"] = {"lengths": later}
    return spec


def _run(tmp_path, spec: dict, uri: str, said: list[str]):
    from orchestrator.run import run_and_report
    from orchestrator.run_context import RunContext

    outcome = run_and_report(RunContext.create(parse_study(spec), uri, storage_dir=tmp_path / "state", local=True),
                             tmp_path / "reports", say=said.append)
    assert outcome.ok, outcome.failed
    return outcome


def _evaluation_tags(run) -> list[dict]:
    return [json.loads(text) for key, text in run.data.tags.items() if key.startswith("orchestrator.evaluation.")]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_trials_score_their_report_lengths_and_an_old_store_is_still_completed(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)
    # A fresh run: each trial scores 128 (4x) itself; the evaluation after training has nothing left.
    fresh, said = f"sqlite:///{tmp_path / 'fresh.db'}", []
    ran = _run(tmp_path, _spec("later", ["4x"]), fresh, said)
    assert not any(line.startswith(("Evaluating", "report.lengths:")) for line in said), said
    runs = _runs(fresh, "later")
    client = MlflowClient(fresh)
    for run in runs.values():
        assert {"ppl_128", "delta_p_128"} <= set(run.data.metrics)
        (tag,) = _evaluation_tags(run)  # logged as `evaluate_later` logs it, saying the trial scored it
        assert tag["lengths"] == [128] and tag["scored_by"] == "trial" and tag["eval_protocol"] == 2
        assert tag["protocol"]["n_windows"] == BASE["eval"]["n_windows"] and tag["threads"] == 1
        assert run.data.tags["eval.protocol"] == "2"
        assert [point.step for point in client.get_metric_history(run.info.run_id, "ppl_by_length")] == [32, 64, 128]
        assert "report.lengths [128] scored" in _log(client, run)
    # The trial identities are those of the study without report.lengths.
    assert {run.data.tags["orchestrator.trial_id"] for run in runs.values()} == \
        {trial.trial_id for trial in expand(parse_study(_spec("later", None)))} == {t.trial_id for t in ran.trials}

    # An old-style store: the same trials trained without report.lengths, then the study run with them: the trials
    # are reused and `evaluate_later` scores 128 from their kept models, the same values bit for bit.
    old, said = f"sqlite:///{tmp_path / 'old.db'}", []
    _run(tmp_path, _spec("later", None), old, said)
    assert not any("ppl_128" in run.data.metrics for run in _runs(old, "later").values())
    said.clear()
    again = _run(tmp_path, _spec("later", ["4x"]), old, said)
    assert len(again.skipped) == 2 and "Evaluating 2 stored trial(s) in this process" in said, said
    completed = _runs(old, "later")
    for label, run in completed.items():
        (tag,) = _evaluation_tags(run)
        assert "scored_by" not in tag and tag["lengths"] == [128]
        for name in ("ppl_128", "delta_p_128", "ppl_64", "ppl_32"):
            assert run.data.metrics[name] == runs[label].data.metrics[name], (label, name)


def _log(client, run) -> str:
    from pathlib import Path

    return Path(client.download_artifacts(run.info.run_id, "trial.log")).read_text()


_EARLY_START = """
import json, sys, threading, time
from orchestrator.execution.cluster import connect
from orchestrator.run import start_ray_early

start_ray_early("sqlite:///" + sys.argv[1], None, False)  # a new store: Ray starts in the background ...
time.sleep(1.0)  # ... while this thread goes on (the store being created, in `orchestrator run`)
import ray
connect(None)  # waits for it
# Ray's processes outlived the start (they die with the thread that spawned them unless it stays): a task runs.
time.sleep(2.0)
print(json.dumps({"cpus": ray.cluster_resources().get("CPU"), "task": ray.get(ray.remote(lambda: 41 + 1).remote()),
                  "threads": [t.name for t in threading.enumerate()]}))
ray.shutdown()
"""


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_new_stores_run_starts_ray_in_the_background_and_keeps_it(tmp_path):
    import os
    import subprocess
    import sys

    from orchestrator.run import start_ray_early

    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "-c", _EARLY_START, str(tmp_path / "new.db")], capture_output=True,
                          text=True, timeout=150, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["task"] == 42 and facts["cpus"] == os.cpu_count() and "ray-start" in facts["threads"]
    # Nowhere else: an existing store (its trials may all be finished), --local, a cluster address.
    from orchestrator.execution import cluster

    (tmp_path / "old.db").write_bytes(b"")
    for uri, address, local in ((f"sqlite:///{tmp_path / 'old.db'}", None, False),
                                (f"sqlite:///{tmp_path / 'new.db'}", None, True),
                                (f"sqlite:///{tmp_path / 'new.db'}", "10.0.0.1:6379", False),
                                ("http://localhost:5000", None, False)):
        start_ray_early(uri, address, local)
        assert not cluster._early, (uri, address, local)

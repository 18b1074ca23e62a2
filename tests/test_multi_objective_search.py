"""A search over several metrics (`search.metric: [ppl_64, ms_per_step]`, `search.mode: [min, min]`): the
schema's forms and refusals, and a real two-metric Optuna search through Ray Tune that ends with its Pareto set
in the report and on the MLflow parent run."""

from __future__ import annotations

import json

import pytest
import yaml
from mlflow.tracking import MlflowClient

from orchestrator import StudyError, parse_study
from orchestrator.study.model import Search

SPACE = {"train.lr": {"type": "loguniform", "low": 1e-4, "high": 1e-2}}


def test_one_metric_stays_a_string_and_several_get_their_directions():
    assert Search(algorithm="optuna", space=SPACE, metric=["ppl_64"], mode=["max"]).metric == "ppl_64"
    single = Search(algorithm="optuna", space=SPACE, metric="ppl_64")
    assert not single.multi_objective and single.metrics == ["ppl_64"] and single.modes == ["min"]
    several = Search(algorithm="optuna", space=SPACE, metric=["ppl_64", "ms_per_step"], mode="min")
    assert several.multi_objective and several.modes == ["min", "min"] and several.primary_metric == "ppl_64"
    mixed = Search(algorithm="random", space=SPACE, metric=["ppl_64", "delta_p_64"], mode=["min", "max"])
    assert mixed.modes == ["min", "max"]


@pytest.mark.parametrize("search, fragment", [
    ({"metric": ["ppl_64", "ms_per_step"], "mode": ["min"] * 3}, "mode: 3 direction(s) for 2 metric(s)"),
    ({"metric": ["ppl_64", "ppl_64"]}, "metric: 'ppl_64' is listed more than once"),
    ({"algorithm": "grid", "space": {}, "metric": ["ppl_64", "ms_per_step"]}, "several metrics are for a sampling"),
    ({"metric": ["ppl_64", "ppl_9999"]}, "search.metric: the trials never log 'ppl_9999'"),
])
def test_malformed_multi_objective_searches_are_refused(search, fragment):
    spec = {"name": "bad", "base": {"model": {"preset": "tiny"}, "train": {"steps": 5, "batch_size": 2, "seq_len": 16},
                                    "eval": {"lengths": [16, 64], "tail_tokens": 8, "n_windows": 1}},
            "search": {"algorithm": "optuna", "num_samples": 2, "space": SPACE, **search}}
    with pytest.raises(StudyError) as error:
        parse_study(spec)
    assert fragment in str(error.value)


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_a_two_metric_search_ends_with_its_pareto_set_in_the_report_and_mlflow(tmp_path, local_ray):
    from orchestrator.run import run_and_report
    from orchestrator.run_context import RunContext

    spec = {"name": "two_metric_search",
            "base": {"model": {"preset": "tiny", "pos_encoding": "kerple", "processor": "dapev2", "d_dape": 4},
                     "data": {"max_files": 100}, "train": {"steps": 8, "batch_size": 4, "seq_len": 32},
                     "eval": {"lengths": [32, 64], "tail_tokens": 16, "n_windows": 2}},
            "search": {"algorithm": "optuna", "num_samples": 3, "metric": ["ppl_64", "ms_per_step"],
                       "mode": ["min", "min"],
                       "space": {"model.kernel_size": {"type": "choice", "values": [1, 3, 5]}, **SPACE}},
            "resources": {"cpus": 1, "max_retries": 0}}
    study_file = tmp_path / "two_metric_search.yaml"
    study_file.write_text(yaml.safe_dump(spec))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    outcome = run_and_report(RunContext.create(parse_study(spec), uri, storage_dir=tmp_path / "state",
                                               study_path=study_file), tmp_path / "reports")
    assert outcome.ok and outcome.trials_run == 3
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("two_metric_search")
    runs = client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'trial'")
    points = {run.info.run_name: (run.data.metrics["ppl_64"], run.data.metrics["ms_per_step"]) for run in runs}
    front = {name for name, (p, m) in points.items()
             if not any(q <= p and n <= m and (q < p or n < m) for other, (q, n) in points.items() if other != name)}
    report = (tmp_path / "reports" / "two_metric_search" / "report.md").read_text()
    assert f"Pareto set of 3 sample(s) by ppl_64 (min) and ms_per_step (min): {len(front)} sample(s)" in report
    pareto_line = next(line for line in report.splitlines() if line.startswith("Pareto set of"))
    assert {name for name in points if name in pareto_line} == front
    parent = client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'study'")[0]
    assert parent.data.tags["search.pareto_size"] == str(len(front))
    assert set(json.loads(parent.data.tags["search.pareto_runs"])) == front
    on_front = client.search_runs([experiment.experiment_id], "tags.`search.pareto` = 'true'")
    assert {run.info.run_name for run in on_front} == front

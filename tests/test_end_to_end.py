"""A real study through Ray Tune and MLflow (SQLite in a temp dir): runs, metrics, report, resume, failure."""


import pytest
import yaml
from mlflow.tracking import MlflowClient

from orchestrator import parse_study
from orchestrator.run import run_and_report
from orchestrator.run_context import RunContext

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

TINY = {
    "name": "tiny_e2e",
    "base": {
        "model": {"preset": "tiny", "pos_encoding": "kerple", "d_dape": 8},
        "data": {"max_files": 300},
        "train": {"steps": 30, "batch_size": 8, "seq_len": 32, "log_every": 10},
        "eval": {"lengths": [32, 64, 128], "tail_tokens": 16, "n_windows": 8},
    },
    "variants": [
        {"label": "Kerple", "baseline": True, "set": {"model.processor": "none"}},
        {"label": "DAPE1x3-Kerple", "set": {"model.processor": "dapev2", "model.kernel_size": 3}},
    ],
    "seeds": [0, 1],
    "resources": {"cpus": 1, "max_retries": 0},
}


def _trial_runs(client, experiment_name):
    experiment = client.get_experiment_by_name(experiment_name)
    return client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'trial'")


def test_study_runs_logs_reports_and_resumes(tmp_path, local_ray):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    study = parse_study(TINY)
    outcome = run_and_report(RunContext.create(study, uri, storage_dir=tmp_path / "state"), tmp_path / "reports")
    assert outcome.ok and len(outcome.trials) == 4

    client = MlflowClient(uri)
    runs = _trial_runs(client, "tiny_e2e")
    assert len(runs) == 4
    parent = client.search_runs([runs[0].info.experiment_id], "tags.`orchestrator.role` = 'study'")
    assert len(parent) == 1
    for run in runs:
        assert run.info.status == "FINISHED"
        assert run.data.tags["mlflow.parentRunId"] == parent[0].info.run_id
        assert run.data.params["model.pos_encoding"] == "kerple"
        for length in (32, 64, 128):
            assert 1.0 < run.data.metrics[f"ppl_{length}"] < 300.0
        history = client.get_metric_history(run.info.run_id, "train_loss")
        assert [m.step for m in history] == [10, 20, 30]
        series = client.get_metric_history(run.info.run_id, "ppl_by_length")
        assert sorted(m.step for m in series) == [32, 64, 128]
        assert run.data.tags["data_hash"]
    # Two trials at a time on two CPUs: the last two run in the processes the first two finished in (Tune reuses
    # them, so torch and the corpus load once per process).
    assert len({run.data.tags["worker_pid"] for run in runs}) == 2

    report = (tmp_path / "reports" / "tiny_e2e" / "report.md").read_text()
    perplexity_table = report.split("## Perplexity by evaluation length", 1)[1].split("\n\n")[2]
    table_rows = [line for line in perplexity_table.splitlines() if line.startswith("| ") and "variant" not in line]
    assert [row.split("|")[1].strip() for row in table_rows] == ["Kerple", "DAPE1x3-Kerple"]
    artifacts = [a.path for a in client.list_artifacts(parent[0].info.run_id)]
    assert "report.md" in artifacts

    # Running it again retrains nothing and creates no new run.
    again = run_and_report(RunContext.create(study, uri, storage_dir=tmp_path / "state"), tmp_path / "reports")
    assert len(again.skipped) == 4 and again.ok
    assert len(_trial_runs(client, "tiny_e2e")) == 4


def test_failing_trial_is_recorded_and_the_study_goes_on(tmp_path, local_ray):
    spec = yaml.safe_load(yaml.safe_dump(TINY))
    spec["name"] = "tiny_failure"
    spec["seeds"] = [0]
    # Valid config, but the held-out text is shorter than one window: the trial fails at evaluation time.
    spec["variants"].append({"label": "TooLong", "set": {"eval.lengths": [32, 10_000_000]}})
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    context = RunContext.create(parse_study(spec), uri, storage_dir=tmp_path / "state")
    outcome = run_and_report(context, tmp_path / "reports")
    assert len(outcome.failed) == 1
    client = MlflowClient(uri)
    by_label = {run.data.tags["label"]: run for run in _trial_runs(client, "tiny_failure")}
    assert by_label["TooLong"].info.status == "FAILED"
    assert "the held-out text holds" in by_label["TooLong"].data.tags["error"]
    assert by_label["Kerple"].info.status == "FINISHED"
    assert by_label["DAPE1x3-Kerple"].info.status == "FINISHED"
    report = (tmp_path / "reports" / "tiny_failure" / "report.md").read_text()
    assert "TooLong · s0: FAILED" in report


def test_optuna_search_with_asha_logs_every_sample_and_reports_the_search(tmp_path, local_ray):
    spec = yaml.safe_load(yaml.safe_dump(TINY))
    spec.pop("variants")
    spec.update(name="tiny_search", seeds=[0])
    spec["base"]["train"].update(steps=60, eval_every=10, val_tokens=512)
    spec["base"]["model"]["processor"] = "dapev2"  # the searched d_dape is the processor's: a trial must read it
    spec["search"] = {"algorithm": "optuna", "num_samples": 4, "metric": "val_loss", "mode": "min",
                      "space": {"train.lr": {"type": "loguniform", "low": 1e-4, "high": 3e-3},
                                "model.d_dape": {"type": "choice", "values": [4, 8]}}}
    spec["scheduler"] = {"type": "asha", "grace_period": 10, "reduction_factor": 2}
    spec["profiles"] = {"grid": {"name": "tiny_search_grid", "search": {"algorithm": "grid"},
                                 "scheduler": {"type": "none"},
                                 "axes": {"train.lr": [1e-4, 1e-3], "model.d_dape": [4, 8]}}}
    study_file = tmp_path / "tiny_search.yaml"
    study_file.write_text(yaml.safe_dump(spec))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    outcome = run_and_report(RunContext.create(parse_study(spec), uri, storage_dir=tmp_path / "state",
                                               study_path=study_file), tmp_path / "reports")
    assert outcome.ok and outcome.trials_run == 4
    runs = _trial_runs(MlflowClient(uri), "tiny_search")
    assert len(runs) == 4 and all(run.info.status == "FINISHED" for run in runs)
    completed = [run for run in runs if run.data.tags.get("stopped_early") != "true"]
    assert completed, "at least the best sample trains to its end"
    for run in completed:
        assert "ppl_128" in run.data.metrics and "val_loss" in run.data.metrics
    # A run ASHA stopped never reached its evaluation: it is tagged, and carries no perplexity.
    for run in runs:
        if run.data.tags.get("stopped_early") == "true":
            assert "ppl_128" not in run.data.metrics
    assert outcome.steps_run <= 4 * 60
    assert {run.data.params["model.d_dape"] for run in runs} <= {"4", "8"}
    assert len({run.data.tags["orchestrator.template_id"] for run in runs}) == 1  # the row they were sampled from

    # The report is the search's: the best sample, every sample, Optuna's history and importances.
    report = (tmp_path / "reports" / "tiny_search" / "report.md").read_text()
    assert "4 sample(s):" in report and "missing" not in report and "no longer defines" not in report
    best = min(completed, key=lambda run: run.data.metrics["val_loss"])
    assert f"with val_loss = {best.data.metrics['val_loss']:.4f} (run {best.info.run_name})" in report
    assert "## Search: optuna over train.lr, model.d_dape with ASHA early stopping" in report
    samples = report.split("Every sample in the order it was drawn", 1)[1].split("\n## ", 1)[0]  # that table alone
    states = [line.split("|")[-3].strip() for line in samples.splitlines()
              if line.startswith("| ") and "state" not in line]
    assert sorted(states) == sorted("stopped by ASHA" if run.data.tags.get("stopped_early") == "true" else "completed"
                                    for run in runs)
    plots = tmp_path / "reports" / "tiny_search" / "plots"
    assert (plots / "search_history.png").is_file()
    if (plots / "search_importances.png").is_file():  # Optuna needs two completed samples that differ
        assert "Parameter importances (Optuna, over the completed samples): " in report
    assert "the grid profile (tiny_search_grid) has not run in this store" in report

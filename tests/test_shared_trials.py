"""One run per distinct trial: rows that differ only in settings their trial does not read (the Kerple
baseline of a `model.d_dape` grid) are one trial, trained once, whose run every such row reads; a store
whose runs carry the identity of older versions (unused settings included) still resumes without retraining."""

import pytest
import yaml
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from orchestrator import StudyError, expand, parse_study
from orchestrator.cli import app
from orchestrator.execution.runner import select_trials
from orchestrator.reporting import load_results
from orchestrator.run import run_and_report
from orchestrator.run_context import RunContext
from orchestrator.study.identity import legacy_identity
from orchestrator.tracking.store import TRIAL_ID_TAG, StudyStore
from orchestrator.trial.trials import distinct, shared_rows

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SPEC = {
    "name": "shared_baseline",
    "base": {"model": {"preset": "tiny", "pos_encoding": "kerple"}, "data": {"max_files": 100},
             "train": {"steps": 3, "batch_size": 4, "seq_len": 32, "log_every": 1},
             "eval": {"lengths": [32, 64], "tail_tokens": 16, "n_windows": 2}},
    "axes": {"model.d_dape": [4, 8]},
    "variants": [{"label": "Kerple", "baseline": True, "set": {"model.processor": "none"}},
                 {"label": "DAPE", "set": {"model.processor": "dapev2"}}],
    "resources": {"cpus": 1, "max_retries": 0},
}


def test_rows_differing_only_in_unused_settings_are_one_trial():
    rows = expand(parse_study(SPEC))
    assert [t.label for t in rows] == ["Kerple (d_dape=4)", "Kerple (d_dape=8)", "DAPE (d_dape=4)", "DAPE (d_dape=8)"]
    assert rows[0].trial_id == rows[1].trial_id  # the baseline does not read d_dape
    assert rows[0].legacy_id != rows[1].legacy_id  # the old identity told them apart
    assert rows[2].trial_id != rows[3].trial_id  # DAPE does
    assert [t.label for t in distinct(rows)] == ["Kerple (d_dape=4)", "DAPE (d_dape=4)", "DAPE (d_dape=8)"]
    assert shared_rows(rows) == {1: 0}
    # the legacy identity is the hash of the whole resolved config less its size: a used value changes both
    assert legacy_identity(rows[2].config) == rows[2].legacy_id != legacy_identity(rows[3].config)


def test_two_variants_resolving_to_one_trial_stay_an_error():
    spec = {**SPEC, "axes": {}, "variants": [{"label": "A", "set": {"model.processor": "none", "model.d_dape": 4}},
                                             {"label": "B", "set": {"model.processor": "none", "model.d_dape": 8}}]}
    with pytest.raises(StudyError, match=r"variants\[0\] \(A\).*variants\[1\] \(B\).*same trial config apart from "
                                         r"settings neither reads"):
        parse_study(spec)


def test_plan_says_shared_with_and_counts_the_trial_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "shared_baseline.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    result = CliRunner().invoke(app, ["plan", str(path)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if "Kerple (d_dape=8)" in line)
    assert "shared with #1" in line
    assert "of 3 estimate(s)" in result.output
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert "valid, 3 trial(s) (4 rows: 1 share another row's trial)" in result.output


def test_plan_fits_100_columns_without_cutting_a_label(tmp_path, monkeypatch):
    from orchestrator import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli.console, "width", 100)
    spec = {**SPEC, "variants": [{"label": "DAPE1x3-Kerple-long-label", "set": {"model.processor": "dapev2",
                                                                          "model.kernel_size": 5}}, *SPEC["variants"]]}
    path = tmp_path / "wide.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = CliRunner().invoke(app, ["plan", str(path)])
    assert result.exit_code == 0, result.output
    table = result.output.split("Estimated time")[0]
    assert "…" not in table and max(len(line) for line in table.splitlines()) <= 100
    lines = table.splitlines()
    header = next(line for line in lines if " trial " in line)
    start, end = header.index("trial"), header.index(" id ")
    trial_column = "".join(line[start:end].strip(" │") for line in lines[lines.index(header) + 2:]).replace(" ", "")
    assert "DAPE1x3-Kerple-long-label(d_dape=4)·s0" in trial_column
    status_column = "".join(line[header.index("status"):].strip(" │") for line in lines[lines.index(header) + 2:])
    assert "shared with#3" in status_column.replace(" #", "#")


def test_help_reflows_and_flags_have_no_type():
    result = CliRunner().invoke(app, ["validate", "--help"], env={"COLUMNS": "200"})
    assert "with its data, and every other profile" in result.output  # not broken where the docstring is
    assert "<bool>" not in result.output
    assert "<bool>" not in CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"}).output


@pytest.mark.slow
def test_the_shared_baseline_trains_once_and_old_stores_resume(tmp_path):
    study = parse_study(SPEC)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    context = RunContext.create(study, uri, storage_dir=tmp_path / "state", local=True)
    outcome = run_and_report(context, tmp_path / "reports")
    assert outcome.ok, outcome.failed
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(study.name)
    runs = client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'trial'")
    assert len(runs) == 3  # not 4: the baseline ran once
    frame = load_results(study, uri)
    kerple = frame[frame["variant"] == "Kerple"]
    assert len(kerple) == 2 and kerple["run_id"].nunique() == 1
    assert list(kerple["swept.model.d_dape"]) == [4, 8]  # each row keeps its own grid point
    assert list(kerple["shared_with"].fillna("")) == ["", "Kerple (d_dape=4)"]
    assert (kerple["ppl_64"].iloc[0] == kerple["ppl_64"].iloc[1])
    markdown = (tmp_path / "reports" / study.name / "report.md").read_text()
    assert "shared with Kerple (d_dape=4)" in markdown
    assert "4 trial(s): 4 finished, 1 of them read another row's run" in markdown

    # The setup summary at the top; the trials table with run ids and parameter counts; one unset marker.
    setup = markdown.split("Setup:", 1)[1].split("\n\n", 1)[0]
    assert "- model: tiny (2 layers, width 64, 2 heads); position encoding Kerple" in setup
    assert f"- parameters: {frame['num_parameters'].min() / 1e6:.2f}" in setup
    assert "- training: 3 steps of 4 x 32 tokens" in setup and "- device: cpu" in setup
    header = next(line for line in markdown.split("## Trials\n", 1)[1].splitlines() if line.startswith("| variant"))
    assert "run id" in header and "params" in header
    for run_id in frame["run_id"]:
        assert run_id in markdown
    config = [c for c in frame.columns if c.startswith("config.")]
    assert "config.che" not in frame and "config.train.eval_every" not in frame  # nobody sets them
    assert not frame[config].isna().any().any()
    assert set(kerple["config.model.d_dape"]) == {"n/a"}

    # A store of the older identity: each run tagged with its row's legacy hash. Nothing is retrained.
    rows = expand(study)
    by_new = {t.trial_id: t.legacy_id for t in distinct(rows)}
    for run in runs:
        client.set_tag(run.info.run_id, TRIAL_ID_TAG, by_new[run.data.tags[TRIAL_ID_TAG]])
    store = StudyStore.open(uri, study.name)
    assert store.finished_trial_ids() == {t.legacy_id for t in distinct(rows)}
    todo, done = select_trials(study, rows, store)
    assert todo == [] and len(done) == 3
    again = load_results(study, uri)
    assert list(again["status"]) == ["FINISHED"] * 4
    assert list(again["run_id"]) == list(frame["run_id"])


@pytest.mark.slow
def test_a_run_of_the_older_identity_left_running_is_closed_as_stale(tmp_path):
    """An orchestrator of an older version (runs tagged with the legacy identity) was killed mid-trial, so its
    run stays RUNNING. The next `run` closes it as KILLED and stale, as it does a run of the current identity,
    and trains that trial again; the finished trials are not retrained. (The store: every trial recorded
    through the recorder with synthetic results, tests/synthetic_store.py; the trial trained again is real.)"""
    import synthetic_store

    from orchestrator.tracking.store import STALE_TAG

    study = parse_study(SPEC)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    store = synthetic_store.write_store(study, uri)
    client = MlflowClient(uri)
    trials = distinct(expand(study))
    run_of = {run.data.tags[TRIAL_ID_TAG]: run.info.run_id for run in store.trial_runs()}
    for trial in trials:  # the store of the older version
        client.set_tag(run_of[trial.trial_id], TRIAL_ID_TAG, trial.legacy_id)
    victim = next(trial for trial in trials if trial.variant == "DAPE")
    client.update_run(run_of[victim.trial_id], status="RUNNING")  # its orchestrator was killed

    context = RunContext.create(study, uri, storage_dir=tmp_path / "state", local=True)
    outcome = run_and_report(context, tmp_path / "reports")
    assert outcome.ok, outcome.failed
    assert [trial.trial_id for trial in outcome.trials if trial not in outcome.skipped] == [victim.trial_id]
    left = client.get_run(run_of[victim.trial_id])
    assert left.info.status == "KILLED" and left.data.tags.get(STALE_TAG) == "true"
    runs = client.search_runs([store.experiment_id], "tags.`orchestrator.role` = 'trial'")
    assert sorted(run.info.status for run in runs) == ["FINISHED"] * len(trials) + ["KILLED"]
    again = [run for run in runs if run.data.tags[TRIAL_ID_TAG] == victim.trial_id]
    assert [run.info.status for run in again] == ["FINISHED"]  # trained again, under the current identity

"""The report of a tiny real study (2 rows x 3 seeds through Ray Tune into MLflow), checked against the same
numbers computed directly from the MLflow store with pandas and scipy."""

import os
import re
import shutil
import subprocess
import sys
import time
import typing

import pandas as pd
import pytest
import report_study
import yaml
from mlflow.tracking import MlflowClient
from report_study import BASELINE, LABELS, LENGTHS
from scipy import stats
from typer.testing import CliRunner

from orchestrator import parse_study
from orchestrator.cli import app
from orchestrator.judging.stats import compare, holm
from orchestrator.reporting import build_report, load_results, render_html, render_latex, render_md
from orchestrator.reporting.cells import signed
from orchestrator.reporting.document import ReportDocument
from orchestrator.reporting.families import FAMILIES
from orchestrator.reporting.tables import build_table
from orchestrator.run_context import RunContext
from orchestrator.study.model import ReportMetric
from orchestrator.tracking.lookup import StudyNotFound
from orchestrator.tracking.store import StudyStore

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # the first test runs the module's study


@pytest.fixture(scope="module")
def built(tmp_path_factory, local_ray):
    return report_study.build(tmp_path_factory.getbasetemp() / "tiny_report_study")


def _trial_runs(uri: str):
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("tiny_report")
    return client, client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'trial'")


def _direct(uri: str) -> pd.DataFrame:
    """Label, seed and final metrics of every trial run, straight from MLflow (no orchestrator code)."""
    _, runs = _trial_runs(uri)
    return pd.DataFrame([{"label": r.data.tags["label"], "seed": int(r.data.tags["seed"]), "status": r.info.status,
                          **r.data.metrics} for r in runs])


def _holm_by_definition(pvalues: list[float]) -> list[float]:
    """p_(k) -> max over j <= k of min(1, (m - j + 1) p_(j)), written from the definition."""
    m, ranked = len(pvalues), sorted(pvalues)
    adjusted = [max(min(1.0, (m - j) * ranked[j]) for j in range(k + 1)) for k in range(m)]
    return [adjusted[ranked.index(p)] for p in pvalues]


def _expected_significance(direct: pd.DataFrame, labels: list[str]) -> dict[tuple[str, int], dict]:
    raw = {}
    for label in labels:
        for length in LENGTHS:
            mine = direct[direct.label == label].set_index("seed")[f"ppl_{length}"].sort_index()
            base = direct[direct.label == BASELINE].set_index("seed")[f"ppl_{length}"].sort_index()
            diffs = mine - base
            raw[(label, length)] = {"p": stats.ttest_rel(mine, base).pvalue, "d": diffs.mean() / diffs.std(ddof=1),
                                    "diff": mine.mean() - base.mean()}
    for key, adjusted in zip(raw, _holm_by_definition([v["p"] for v in raw.values()])):
        raw[key]["p_holm"] = adjusted
    return raw


def _markdown_table(markdown: str, heading: str, index: int = 0) -> list[list[str]]:
    """The index-th pipe table after a heading, as rows of stripped cells (header row first)."""
    section = markdown.split(f"## {heading}", 1)[1]
    tables, current = [], []
    for line in section.splitlines():
        if line.startswith("|"):
            current.append(line)
        elif current:
            tables.append(current)
            current = []
        if line.startswith("## "):
            break
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in tables[index]]
    return [rows[0]] + rows[2:]


def test_perplexity_table_matches_a_direct_computation(built):
    direct = _direct(built.tracking_uri)
    assert len(direct) == 6 and set(direct.status) == {"FINISHED"}
    markdown = (built.report_dir / "report.md").read_text()
    header, *rows = _markdown_table(markdown, "Perplexity by evaluation length")
    assert header == ["variant", "L=32", "L=64", "L=128", "n", "ratio (L=128)", "Δ (L=128)"]
    assert [row[0] for row in rows] == LABELS

    means = direct.groupby("label")[[f"ppl_{L}" for L in LENGTHS]].mean()
    stds = direct.groupby("label")[[f"ppl_{L}" for L in LENGTHS]].std(ddof=1)
    csv = pd.read_csv(built.report_dir / "table_perplexity.csv")
    for row in rows:
        label = row[0]
        for position, length in enumerate(LENGTHS, start=1):
            column = f"ppl_{length}"
            mean, std = means.loc[label, column], stds.loc[label, column]
            text = f"{mean:.3f} ± {std:.3f}"
            best = means[column].idxmin() == label
            assert row[position] == (f"**{text}**" if best else text)  # no marker: nothing is significant here
            line = csv[(csv.variant == label) & (csv.column == column)].iloc[0]
            assert line["mean"] == pytest.approx(mean, rel=1e-12) and line["std"] == pytest.approx(std, rel=1e-12)
            assert line["n"] == 3 and bool(line["best"]) == best
        ratio = means.loc[label, "ppl_128"] / means.loc[BASELINE, "ppl_128"]
        assert row[4] == "3/3"
        assert row[5] == ("1.000" if label == BASELINE else f"{ratio:.3f}")
        assert row[6] == ("–" if label == BASELINE else f"{signed((ratio - 1) * 100, 1)}%")  # "0.0%" for no change


def test_p_values_effect_sizes_and_holm_correction_match_scipy(built):
    direct = _direct(built.tracking_uri)
    expected = _expected_significance(direct, ["DAPE1x3-Kerple"])
    csv = pd.read_csv(built.report_dir / "table_perplexity.csv")
    for (label, length), numbers in expected.items():
        line = csv[(csv.variant == label) & (csv.column == f"ppl_{length}")].iloc[0]
        assert line["test"] == "paired t"
        assert line["p"] == pytest.approx(numbers["p"], rel=1e-9)
        assert line["p_holm"] == pytest.approx(numbers["p_holm"], rel=1e-9)
        assert line["cohens_d"] == pytest.approx(numbers["d"], rel=1e-9)
        assert line["diff_to_baseline"] == pytest.approx(numbers["diff"], rel=1e-9)
    assert csv[csv.variant == BASELINE]["test"].isna().all()  # the baseline is not compared with itself

    markdown = (built.report_dir / "report.md").read_text()
    header, *rows = _markdown_table(markdown, "Perplexity by evaluation length", index=1)
    assert [row[0] for row in rows] == ["DAPE1x3-Kerple"]
    for row in rows:
        for position, length in enumerate(LENGTHS, start=1):
            numbers = expected[(row[0], length)]
            p_text = "p < 0.001" if numbers["p_holm"] < 0.001 else f"p = {numbers['p_holm']:.3f}"
            assert f"{p_text}" in row[position] and f"d = {numbers['d']:.2f}" in row[position]
            assert "paired t, n = 3" in row[position]
    assert "Holm-corrected over the 3 comparison(s)" in markdown


def test_holm_and_small_samples():
    # Holm (1979) on four p-values: sorted 0.005, 0.01, 0.03, 0.04 -> x4, x3, x2, x1, then made monotone.
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, float("nan"), 0.01]) == pytest.approx([0.5, float("nan"), 0.02], nan_ok=True)
    two = compare(pd.Series([5.0, 5.1], index=[0, 1]), pd.Series([6.0, 6.2], index=[0, 1]))
    assert two.test == "n < 3" and not two.tested and not two.significant and two.marker == ""
    # Seeds that do not match: Welch's t-test on the two groups.
    unpaired = compare(pd.Series([5.0, 5.1, 5.3], index=[0, 1, 2]), pd.Series([6.0, 6.2, 6.1], index=[3, 4, 5]))
    assert unpaired.test == "Welch t"
    assert unpaired.p == pytest.approx(stats.ttest_ind([5.0, 5.1, 5.3], [6.0, 6.2, 6.1], equal_var=False).pvalue)


def test_interrupted_and_extended_study_lists_what_is_missing(built, tmp_path):
    shutil.copy(built.tracking_uri.removeprefix("sqlite:///"), tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client, runs = _trial_runs(uri)
    killed = next(r for r in runs if r.data.tags["label"] == "DAPE1x3-Kerple" and r.data.tags["seed"] == "2")
    client.set_terminated(killed.info.run_id, status="KILLED")  # as if its orchestrator had been interrupted
    extended = yaml.safe_load(yaml.safe_dump(report_study.STUDY))
    extended["seeds"] = [0, 1, 2, 3]  # one more seed, never run

    tracker = StudyStore.open(uri, "tiny_report")
    tracker.parent_run_id = None  # the copy shares the original's artifact folder: attach nothing
    report = build_report(RunContext.of(parse_study(extended), tracker), tmp_path / "reports")
    trials = report.document.trials
    assert len(trials) == 8
    assert sorted(trials[trials.status == "MISSING"].label) == sorted(LABELS)
    markdown = report.markdown
    assert "DAPE1x3-Kerple · s2: KILLED" in markdown
    assert "DAPE-Kerple · s3: MISSING: no run in the tracking store" in markdown
    assert "DAPE1x3-Kerple · s3: MISSING: no run in the tracking store" in markdown

    csv = pd.read_csv(tmp_path / "reports" / "tiny_report" / "table_perplexity.csv")
    cut = csv[csv.variant == "DAPE1x3-Kerple"]
    assert set(cut.test) == {"n < 3"} and cut.p.isna().all() and set(cut.n) == {2}
    assert set(cut.seeds_expected) == {4}
    # Nothing left to test: said plainly, with what is missing, instead of "Holm-corrected over 0 comparisons".
    assert "over the 0 comparison(s)" not in markdown
    assert "Significance: not tested. A paired t-test (its p-value and Cohen's d) needs at least 3" in markdown
    direct = _direct(built.tracking_uri)
    kept = direct[(direct.label == "DAPE1x3-Kerple") & (direct.seed < 2)]
    assert list(cut.set_index("column").loc[[f"ppl_{L}" for L in LENGTHS], "mean"]) == pytest.approx(
        [kept[f"ppl_{L}"].mean() for L in LENGTHS], rel=1e-12)
    header, *rows = _markdown_table(markdown, "Perplexity by evaluation length")
    assert {row[0]: row[4] for row in rows} == {"DAPE-Kerple": "3/4", "DAPE1x3-Kerple": "2/4"}
    assert "these rows have 2–3" in markdown  # the finished seeds: 2 of the cut row, 3 of the baseline


def test_a_significant_difference_is_marked_in_every_format(built):
    """Inject a clear effect into real results (DAPE1x3 = DAPE − 5 − 0.1·seed): every format marks it."""
    frame = load_results(built.study, built.tracking_uri)
    for length in LENGTHS:
        column = f"ppl_{length}"
        baseline = frame[frame.label == BASELINE].set_index("seed")[column]
        rows = frame.label == "DAPE1x3-Kerple"
        frame.loc[rows, column] = [baseline[s] - 5 - 0.1 * s for s in frame.loc[rows, "seed"]]
    table = build_table(FAMILIES[0], frame, "final value")
    row = table.row("DAPE1x3-Kerple")
    assert all(c.significant and c.marker for c in row.comparisons.values())
    assert table.best("ppl_128") == {"DAPE1x3-Kerple"}
    marker = row.comparisons["ppl_128"].marker
    document = ReportDocument("tiny_report", "", built.tracking_uri, "1", "final value", frame,
                              frame.iloc[0:0], tables=[table])
    assert re.search(r"\*\*[0-9.]+ ± [0-9.]+\*\*" + re.escape(marker.replace("*", "\\*")), render_md.render(document))
    assert f"<sup class=\"sig\">{marker}</sup>" in render_html.render(document)
    latex_cell = r"\$\\mathbf\{[0-9.]+\}_\{\\pm [0-9.]+\}\^\{" + re.escape(marker) + r"\}\$"
    assert re.search(latex_cell, render_latex.render(document))


def test_results_dataframe_has_config_swept_and_metric_columns(built):
    frame = load_results(built.study, built.tracking_uri)
    direct = _direct(built.tracking_uri).set_index(["label", "seed"])
    assert len(frame) == 6 and list(frame.label) == [label for label in LABELS for _ in range(3)]
    assert set(frame.status) == {"FINISHED"} and frame.in_study.all()
    for column in ("config.model.kernel_size", "config.train.steps", "swept.model.kernel_size",
                   "ppl_32", "ppl_128", "train_seconds", "run_id", "device"):
        assert column in frame.columns, column
    assert frame["config.train.steps"].eq(30).all()
    kernels = frame.groupby("label")["swept.model.kernel_size"].first()
    assert kernels["DAPE-Kerple"] == 1 and kernels["DAPE1x3-Kerple"] == 3
    assert frame["config.model.processor"].eq("dapev2").all()
    for _, row in frame.iterrows():
        assert row["ppl_64"] == direct.loc[(row["label"], row["seed"]), "ppl_64"]

    # Another value of each run's history: the one at step 20, or the best one.
    client = MlflowClient(built.tracking_uri)
    at_20 = load_results(built.study, built.tracking_uri, value="step:20").set_index("run_id")["train_loss"]
    best = load_results(built.study, built.tracking_uri, value="best").set_index("run_id")["train_loss"]
    for run_id in at_20.index:
        history = client.get_metric_history(run_id, "train_loss")
        assert at_20[run_id] == next(m.value for m in history if m.step == 20)
        assert best[run_id] == min(m.value for m in history)


def test_runs_carry_the_dashboard_tags(built):
    client, runs = _trial_runs(built.tracking_uri)
    names = sorted(r.info.run_name for r in runs)
    assert names == sorted(f"{label} · s{seed}" for label in LABELS for seed in (0, 1, 2))
    for run in runs:
        tags = run.data.tags
        assert tags["orchestrator.study"] == "tiny_report" and tags["variant"] == tags["label"]
        assert tags["device"] == "cpu" and tags["data_hash"] and tags["code_version"]
        assert tags["orchestrator.trial_id"]
        expected = {"DAPE-Kerple": {"swept.model.kernel_size": "1"}, "DAPE1x3-Kerple": {"swept.model.kernel_size": "3"}}
        assert {k: v for k, v in tags.items() if k.startswith("swept.")} == expected[tags["label"]]
        assert run.data.params["model.kernel_size"] in ("1", "3")  # params flattened with dotted keys
        series = client.get_metric_history(run.info.run_id, "ppl_by_length")
        assert {m.step: m.value for m in series} == {L: run.data.metrics[f"ppl_{L}"] for L in LENGTHS}


def test_report_files_plots_latex_and_artifacts(built):
    folder = built.report_dir
    for name in ("report.md", "report.html", "tables.tex", "results.csv", "table_perplexity.csv", "table_time.csv",
                 "plots/perplexity_vs_length.png", "plots/perplexity_vs_model_kernel_size.png",
                 "plots/training_curves.png"):
        assert (folder / name).is_file() and (folder / name).stat().st_size > 200, name
    assert len(pd.read_csv(folder / "results.csv")) == 6

    tex = (folder / "tables.tex").read_text()
    assert tex.count(r"\begin{table}") == tex.count(r"\end{table}") == 3  # perplexity, ΔP and time cost
    assert tex.count(r"\toprule") == tex.count(r"\bottomrule") == 3
    assert r"& ratio & $\Delta$ \\" in tex and "ratio: the row's mean over its baseline's at L=128" in tex
    assert r"\label{tab:tiny-report-perplexity}" in tex
    perplexity = tex.split(r"\end{table}")[0]
    assert perplexity.count(r"\mathbf{") == 3  # one best per evaluation length
    assert re.search(r"^DAPE1x3-Kerple & \$(\\mathbf\{)?[0-9.]+\}?_\{\\pm [0-9.]+\}\$", perplexity, re.M)
    time_table = pd.read_csv(folder / "table_time.csv")
    assert set(time_table.column) == {"train_seconds", "eval_seconds", "ms_per_step", "ms_forward_32",
                                      "ms_forward_64", "ms_forward_128"}

    client = MlflowClient(built.tracking_uri)
    experiment = client.get_experiment_by_name("tiny_report")
    parent = client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'study'")[0]
    attached = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"report.md", "report.html", "tables.tex", "results.csv", "table_perplexity.csv", "plots"} <= attached
    assert {a.path for a in client.list_artifacts(parent.info.run_id, "plots")} >= {"plots/perplexity_vs_length.png"}


def test_report_command(built, tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["report", str(built.study_file), "--tracking-uri", built.tracking_uri,
                                 "--reports-dir", str(tmp_path), "--value", "best"])
    assert result.exit_code == 0, result.output
    # A summary (the headline table) and where the report is; the whole report with --print.
    assert "| DAPE1x3-Kerple" in result.output and "best value logged by each run" in result.output
    assert f"Report: {tmp_path / 'tiny_report' / 'report.html'}" in result.output and "## Plots" not in result.output
    assert (tmp_path / "tiny_report" / "report.html").is_file()
    full = runner.invoke(app, ["report", str(built.study_file), "--tracking-uri", built.tracking_uri,
                               "--reports-dir", str(tmp_path), "--print"])
    assert full.exit_code == 0 and "## Plots" in full.output and "## Trials" in full.output

    other = yaml.safe_load(built.study_file.read_text())
    other["name"] = "never_run"
    (tmp_path / "never_run.yaml").write_text(yaml.safe_dump(other))
    missing = runner.invoke(app, ["report", str(tmp_path / "never_run.yaml"), "--tracking-uri", built.tracking_uri])
    assert missing.exit_code == 2 and "no experiment 'never_run'" in missing.output  # the wrong store or study
    assert "--tracking-uri URI" in missing.output and "tracking_uri=" not in missing.output
    bad = runner.invoke(app, ["report", str(built.study_file), "--tracking-uri", built.tracking_uri, "--value", "last"])
    assert bad.exit_code == 2 and "'final', 'best' or 'step:N'" in bad.output


def test_reports_of_one_study_written_at_once_all_succeed(built, tmp_path):
    """Two orchestrators of one study end together and each writes the study's report into the same folder
    (test_resilience's two runs at once): one's clearing plots/ took the figures from under the other's
    writing them, and it stopped with FileNotFoundError. Four `orchestrator report` at once must all succeed."""
    command = [sys.executable, "-m", "orchestrator", "report", str(built.study_file), "--tracking-uri",
               built.tracking_uri, "--reports-dir", str(tmp_path)]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    procs = []
    for _ in range(4):  # half a second apart: one clears plots/ while another writes its figures
        procs.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env))
        time.sleep(0.5)
    outputs = [proc.communicate(timeout=300)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0, 0], outputs
    folder = tmp_path / "tiny_report"
    assert {"report.md", "report.html", "tables.tex", "results.csv"} <= {p.name for p in folder.iterdir()}
    assert (folder / "plots" / "perplexity_vs_length.png").stat().st_size > 0


def test_one_rule_finds_a_study_and_its_store_from_any_folder(built, tmp_path, monkeypatch):
    """A study argument is a file, or a name in studies/; the store defaults to mlruns/mlflow.db in the
    project folder (the folder holding studies/). The CLI and load_results follow the same rule."""
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    (project / "studies").mkdir(parents=True)
    (project / "mlruns").mkdir()
    elsewhere.mkdir()
    shutil.copy(built.study_file, project / "studies" / "tiny_report.yaml")
    shutil.copy(built.tracking_uri.removeprefix("sqlite:///"), project / "mlruns" / "mlflow.db")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)

    monkeypatch.chdir(elsewhere)  # the study file's project folder, not the current one, holds the store
    frame = load_results(str(project / "studies" / "tiny_report.yaml"))
    assert len(frame) == 6 and set(frame.status) == {"FINISHED"}
    monkeypatch.chdir(project)  # a study's name: studies/<name>.yaml
    assert len(load_results("tiny_report")) == 6
    runner = CliRunner()
    by_name = runner.invoke(app, ["report", "tiny_report", "--value", "best"])
    assert by_name.exit_code == 0, by_name.output
    assert (project / "reports" / "tiny_report" / "report.html").is_file()  # in the project folder too

    monkeypatch.chdir(elsewhere)
    unknown = runner.invoke(app, ["report", "tiny_report"])
    assert unknown.exit_code == 2 and str(elsewhere / "studies" / "tiny_report.yaml") in unknown.output
    (project / "mlruns" / "mlflow.db").unlink()
    with pytest.raises(StudyNotFound) as caught:
        load_results(str(project / "studies" / "tiny_report.yaml"))
    message = str(caught.value)  # what was tried, and the Python argument (not the command line's flag)
    assert str(project / "mlruns" / "mlflow.db") in message and f"project folder {project}" in message
    assert "tracking_uri=" in message and "--tracking-uri" not in message


def test_new_metric_families_get_their_tables(built):
    """ΔP, time-cost and accuracy metrics are not logged yet: derive columns of those names from the real
    results and check each gets its table, its headers and its sense of "best"."""
    frame = load_results(built.study, built.tracking_uri)
    frame["delta_p_64"] = frame["ppl_32"] - frame["ppl_64"]
    frame["delta_p_128"] = frame["ppl_32"] - frame["ppl_128"]
    frame["ms_per_step"] = frame["train_seconds"] / 30 * 1000
    frame["ms_forward_128"] = frame["eval_seconds"] * 1000
    # An accuracy-like column whose row means differ well beyond the table's 3 decimals (1 / ppl_32, about
    # 0.016 in every row, would print the same in each row and so, rightly, bold none; since the rows share their
    # initial network the two rows' ppl_32 differ by less than 0.01, so the rows are set 0.02 apart, with the
    # runs' own spread on top).
    frame["che_acc_parity_check"] = (0.5 + (frame["ppl_32"].mean() - frame["ppl_32"]) / 10
                                     + 0.02 * (frame["label"] == BASELINE))
    from orchestrator.reporting.tables import build_tables

    tables = {table.family.key: table for table in build_tables(frame, "final value")}
    assert list(tables) == ["perplexity", "delta_p", "accuracy", "time"]
    delta_p, time_cost, accuracy = tables["delta_p"], tables["time"], tables["accuracy"]
    # ΔP is logged for real now, at every evaluation length; at the training length (32) it is 0 by definition
    # in every run: that column is left out and the caption says why.
    assert [delta_p.header(c) for c in delta_p.columns] == ["L=64", "L=128"] and delta_p.left_out == ["delta_p_32"]
    assert "L=32 left out: ΔP is 0 there by definition" in delta_p.caption()
    # ms per forward is measured for real at every evaluation length now.
    assert [time_cost.header(c) for c in time_cost.columns] == [
        "ms/step", "ms/fwd L=32", "ms/fwd L=64", "ms/fwd L=128", "train s", "eval s"]
    assert time_cost.reference == "ms_per_step" and accuracy.header("che_acc_parity_check") == "parity check"
    means = frame.groupby("label")[["delta_p_128", "che_acc_parity_check", "ms_per_step"]].mean()
    tied = means["delta_p_128"].round(delta_p.family.decimals).nunique() == 1  # as printed: a tie has no best
    assert delta_p.best("delta_p_128") == (set() if tied else {means["delta_p_128"].idxmax()})  # higher is better
    assert accuracy.best("che_acc_parity_check") == {means["che_acc_parity_check"].idxmax()}
    assert time_cost.best("ms_per_step") == {means["ms_per_step"].idxmin()}
    frame["che_acc_parity_check"] = 0.5 + frame["ppl_32"] * 1e-6  # rows that print alike tie: no row is best
    tied = {table.family.key: table for table in build_tables(frame, "final value")}["accuracy"]
    assert tied.best("che_acc_parity_check") == set()
    assert not time_cost.comparisons() and delta_p.comparisons()  # times are compared by ratio, not tested


def test_report_metric_names_the_headline_table(built, tmp_path):
    """`report.metric` makes its family the report's first table; the others follow in their usual order."""
    spec = yaml.safe_load(yaml.safe_dump(report_study.STUDY))
    spec["report"] = {"metric": "delta_p"}
    store = StudyStore.open(built.tracking_uri, "tiny_report")
    store.parent_run_id = None  # attach nothing: the built study's parent run keeps its own report
    report = build_report(RunContext.of(parse_study(spec), store), tmp_path / "reports")
    keys = [table.family.key for table in report.document.tables]
    assert keys[0] == "delta_p" and "perplexity" in keys[1:]
    assert report.markdown.index("## ΔP") < report.markdown.index("## Perplexity")
    assert {family.metric for family in FAMILIES} == set(typing.get_args(ReportMetric))


@pytest.fixture(scope="module")
def grid(tmp_path_factory, local_ray):
    return report_study.build_grid(tmp_path_factory.getbasetemp() / "tiny_grid_study")


def test_grid_study_reads_in_blocks_compared_within_each_grid_point(grid):
    """Variants crossed with a grid: one block per grid point, each row compared with its own point's baseline."""
    direct = _direct_of(grid.tracking_uri, "tiny_grid")
    markdown = (grid.report_dir / "report.md").read_text()
    header, *rows = _markdown_table(markdown, "Perplexity by evaluation length")
    assert header[:2] == ["grid point", "variant"] and header[-2:] == ["ratio (L=128)", "Δ (L=128)"]
    assert [row[:2] for row in rows] == [["pos_encoding=nope", "plain"], ["", "DAPE"],
                                         ["pos_encoding=kerple", "plain"], ["", "DAPE"]]
    for (point, _), row in zip([("nope", 0), ("nope", 1), ("kerple", 0), ("kerple", 1)], rows):
        base = direct.loc[f"plain (pos_encoding={point})", "ppl_128"]
        mine = direct.loc[f"{row[1]} (pos_encoding={point})", "ppl_128"]
        assert row[-2] == f"{mine / base:.3f}"  # every row against the baseline of its own grid point
        assert row[-1] == ("–" if row[1] == "plain" else f"{signed((mine / base - 1) * 100, 1)}%")
        block = [direct.loc[f"{v} (pos_encoding={point})", "ppl_128"] for v in ("plain", "DAPE")]
        tied = len({round(value, 3) for value in block}) == 1  # as printed: no best where the block ties
        assert row[4].startswith("**") == (mine == min(block) and not tied)  # within the block, not across
    # One seed: no test is possible, and the report says why instead of "Holm-corrected over 0 comparisons".
    assert "over the 0 comparison(s)" not in markdown and "these rows have 1." in markdown
    assert "Baseline: the plain row of each grid point." in markdown
    # ΔP at the training length is 0 by definition: no all-zero column, the caption says why; never "-0.000".
    header, *rows = _markdown_table(markdown, "ΔP (information gain) by evaluation length")
    assert header[2:4] == ["L=64", "L=128"] and "-0.000" not in markdown
    assert "L=32 left out: ΔP is 0 there by definition" in markdown
    tex = (grid.report_dir / "tables.tex").read_text()
    assert tex.split(r"\end{table}")[0].count(r"\midrule") == 2  # header rule + one between the two blocks
    csv = pd.read_csv(grid.report_dir / "table_perplexity.csv")
    assert set(csv[csv.variant.str.startswith("DAPE")].baseline) == {"plain (pos_encoding=nope)",
                                                                      "plain (pos_encoding=kerple)"}


def _direct_of(uri: str, name: str) -> pd.DataFrame:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(name)
    runs = client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'trial'")
    return pd.DataFrame([{"label": r.data.tags["label"], **r.data.metrics} for r in runs]).set_index("label")


def test_report_baseline_names_the_rows_compared_with(grid, tmp_path):
    """report.baseline: a variant (its row at each grid point) or one row (the baseline of every row)."""
    store = StudyStore.open(grid.tracking_uri, "tiny_grid")
    for name, expected in (
            ("DAPE", {"plain (pos_encoding=nope)": "DAPE (pos_encoding=nope)",
                      "plain (pos_encoding=kerple)": "DAPE (pos_encoding=kerple)"}),
            ("plain (pos_encoding=kerple)", {"plain (pos_encoding=nope)": "plain (pos_encoding=kerple)",
                                             "DAPE (pos_encoding=nope)": "plain (pos_encoding=kerple)",
                                             "DAPE (pos_encoding=kerple)": "plain (pos_encoding=kerple)"})):
        spec = {**report_study.GRID, "report": {"baseline": name}}
        report = build_report(RunContext.of(parse_study(spec), store), tmp_path / name, attach=False)
        table = report.document.tables[0]
        assert {row.label: row.baseline_label for row in table.rows if row.baseline_label} == expected
        assert all(row.is_baseline == (row.label in expected.values()) for row in table.rows)
    with pytest.raises(Exception, match="report.baseline 'Kerple' is neither a variant nor a row"):
        parse_study({**report_study.GRID, "report": {"baseline": "Kerple"}})


def test_legends_are_outside_the_axes(built, tmp_path):
    """The report's line plots put their legend beside the axes, where it covers no line."""
    import matplotlib.pyplot as plt

    from orchestrator.reporting import plots

    frame = load_results(built.study, built.tracking_uri)
    table = build_table(FAMILIES[0], frame, "final value")
    captured = []
    original = plots._save
    try:  # look at the figure by_length draws just before it is written
        def capture(fig, folder, name, panels=False):
            captured.append(fig)
            return original(fig, folder, name, panels)

        plots._save = capture
        plots.by_length(table, frame, tmp_path)
    finally:
        plots._save = original
    fig = captured[0]
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()  # the report's figures carry no drawing canvas of their own
    legend = fig.legends[0].get_window_extent(renderer)
    axes = fig.axes[0].get_window_extent(renderer)
    assert legend.x0 >= axes.x1  # entirely right of the plot area
    assert legend.x1 <= fig.bbox.x1 and legend.y0 >= fig.bbox.y0  # and inside the figure (which is not cropped)
    # the baseline is named so in the legend, and the training length's marker is named last
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [f"{BASELINE} (baseline)", *report_study.LABELS[1:],
                                                                 "training length"]
    plt.close(fig)

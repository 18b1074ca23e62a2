"""Issue 54, item 5: the small gaps a researcher meets on day one. `--version`; `validate` takes KEY=VALUE
overrides like `run` and `plan`; `plan --decide` is accepted (plan always shows --decide's budget); plan's notes
are two lines unless --explain; a run logs no param its trial does not read; Ray's token-authentication warning
is not printed where the product chose the token mode itself."""

from __future__ import annotations

import re
import textwrap
from importlib.metadata import version

import pandas as pd
import pytest
from cli_support import run_cli
from mlflow.tracking import MlflowClient
from pydantic import TypeAdapter
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.study.expect import Claim, generated_statement

STUDY = textwrap.dedent("""\
    name: day_one
    base:
      model: {preset: tiny, pos_encoding: kerple}
      data: {source: stdlib}
      train: {steps: 2, batch_size: 2, seq_len: 32}
      eval: {lengths: [32], tail_tokens: 8, n_windows: 2}
    variants:
      - {label: Kerple, baseline: true, set: {model.processor: none}}
      - {label: DAPE, set: {model.processor: dapev2, model.kernel_size: 3}}
    expect:
      - {id: dape_below, kind: compare, source: test, variant: DAPE, direction: below, metric: ppl, at: [1x]}
    """)


def _study(tmp_path):
    path = tmp_path / "day_one.yaml"
    path.write_text(STUDY)
    return path


def test_version_prints_the_packages_version(capsys):
    code, output = run_cli(capsys, "--version")
    assert code == 0, output
    assert output.strip() == f"orchestrator {version('dape-orchestrator')}"


def test_validate_takes_overrides_and_reports_theirs_with_the_studys(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _study(tmp_path)
    code, output = run_cli(capsys, "validate", path, "train.steps=5")
    assert code == 0 and "valid, 2 trial(s)" in output, output
    code, output = run_cli(capsys, "validate", path, "train.steps=abc", "model.kernel_sise=3")
    text = " ".join(output.split())
    assert code == 2 and "2 problem(s)" in text, output
    assert "base.train.steps: Input should be a valid integer, got 'abc'" in text
    assert "base.model.kernel_sise: unknown key 'kernel_sise' (did you mean 'kernel_size'?)" in text
    code, output = run_cli(capsys, "validate", "train.steps=5")
    assert code == 2 and "no study given" in output, output
    assert not (tmp_path / "mlruns").exists()


def test_plan_accepts_decide_and_keeps_its_notes_to_two_lines_unless_explained(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _study(tmp_path)
    uri = ["--tracking-uri", f"sqlite:///{tmp_path}/none.db"]
    code, short = run_cli(capsys, "plan", path, *uri)
    assert code == 0, short
    code, decided = run_cli(capsys, "plan", path, "--decide", *uri)
    assert code == 0, decided
    assert "plan always shows what --decide would train" in decided
    assert decided.split("\n", 1)[1] == short  # a no-op besides that line
    code, explained = run_cli(capsys, "plan", path, "--explain", *uri)
    assert code == 0, explained
    after_table = short.rsplit("┘", 1)[1].strip().splitlines()
    notes = [line for line in after_table if line.startswith(("Notes:", "plan --explain:"))]
    assert len(notes) == 2, short
    assert "whole study with --decide: first look" in short  # the budget stays
    assert "dape_below: expected" not in short and "dape_below: expected" in explained
    for full in ("assumed sustained throughput", "weights: the size of the model"):
        assert full not in short and full in " ".join(explained.split()), full
    assert len(" ".join(after_table).split()) < len(explained.rsplit("┘", 1)[1].split()) / 2


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """The study run in this process (--local), into a SQLite store, with its report."""
    folder = tmp_path_factory.mktemp("day_one")
    path = _study(folder)
    uri = f"sqlite:///{folder}/mlflow.db"
    result = CliRunner().invoke(app, ["run", str(path), "--local", "--tracking-uri", uri, "--storage-dir",
                                      str(folder / "state"), "--reports-dir", str(folder / "reports")])
    assert result.exit_code == 0, result.output
    return path, uri, folder / "reports" / "day_one"


def test_a_run_logs_no_param_its_trial_does_not_read(ran, capsys):
    path, uri, reports = ran
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("day_one")
    runs = client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'trial'")
    by_label = {run.data.tags["mlflow.runName"].split(" ·")[0]: run.data.params for run in runs}
    assert set(by_label) == {"Kerple", "DAPE"}, by_label
    for label, params in by_label.items():
        assert not {value for value in params.values() if value in ("n/a", "None")}, (label, params)
    assert "model.kernel_size" not in by_label["Kerple"] and by_label["DAPE"]["model.kernel_size"] == "3"
    assert by_label["Kerple"]["model.pos_encoding"] == "kerple" and by_label["Kerple"]["train.steps"] == "2"
    # The report still says the baseline has no kernel: a setting a run did not log reads "n/a".
    csv = pd.read_csv(reports / "results.csv", keep_default_na=False)
    kernels = dict(zip(csv["variant"], csv["config.model.kernel_size"].astype(str)))
    assert kernels == {"Kerple": "n/a", "DAPE": "3"}, kernels
    # A second plan reads these runs' measured steps (its lookup does not need the params left out).
    code, output = run_cli(capsys, "plan", path, "--tracking-uri", uri)
    assert code == 0 and output.count("measured") >= 2, output


def test_the_report_states_a_claim_without_text_and_its_html_shows_no_markdown(ran):
    _, _, reports = ran
    markdown, html = (reports / "report.md").read_text(), (reports / "report.html").read_text()
    statement = "DAPE's ppl at 1x below the baseline"
    assert statement in markdown and statement.replace("'", "&#x27;") in html
    assert "| compare |" not in markdown and "<td>compare</td>" not in html  # not the bare kind
    assert "`" in markdown  # the Markdown has code spans ...
    text = re.sub(r"<(style|script)\b.*?</\1>", "", html, flags=re.S)
    text = re.sub(r"<[^>]+>", "", text)
    assert "`" not in text, [line for line in text.splitlines() if "`" in line]  # ... the page shows none
    assert "<code>orchestrator run --decide</code>" in html


def test_ray_does_not_warn_of_token_authentication_the_product_turned_on(monkeypatch):
    import os

    from ray._private.authentication import authentication_token_setup as setup

    from orchestrator.execution.cluster import local_token_auth

    warned: list[str] = []
    monkeypatch.setattr(setup.logger, "warning", lambda message, *args: warned.append(str(message)))
    monkeypatch.setattr(setup, "_enable_token_auth", lambda: None)  # not Ray's global config in this test
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    assert setup.enable_token_auth_by_default()  # what ray.init does for a new local cluster
    assert any("Token authentication is enabled" in text for text in warned)  # Ray's default: at every start
    warned.clear()
    local_token_auth()  # what connect / start_local_early do before ray.init
    assert os.environ["RAY_AUTH_MODE"] == "token"  # the same setting: token authentication on
    assert setup.enable_token_auth_by_default()
    assert warned == []
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the user's choice is kept
    local_token_auth()
    assert os.environ["RAY_AUTH_MODE"] == "disabled"


@pytest.mark.parametrize("claim, words", [
    ({"kind": "compare", "variant": "DAPE", "direction": "below", "at": ["1x", "8x"]},
     "DAPE's ppl at 1x, 8x below the baseline"),
    ({"kind": "compare", "variant": "A", "than": "B", "direction": "below", "within": 0.05, "at": ["8x"]},
     "A's ppl at 8x below B, by less than 5%"),
    ({"kind": "compare", "variant": "A", "direction": "below", "at": ["8x"], "over": "1x"},
     "A's ppl at 8x over its ppl at 1x below the baseline's"),
    ({"kind": "length_ratio", "variant": "A", "at": "8x", "over": "1x", "at_least": 2},
     "A's ppl at 8x over its ppl at 1x at least 2"),
    ({"kind": "trend", "variants": ["A", "B"], "axis": "model.d_dape", "direction": "decreasing", "tolerance": 0.01,
      "at": ["1x"]}, "ppl at 1x decreasing with model.d_dape for A, B (each step within 1% the other way)"),
    ({"kind": "order", "variants": ["A", "B"], "direction": "increasing", "at": ["1x"]},
     "ppl at 1x increasing in the order A, B"),
    ({"kind": "best", "variant": "A", "direction": "lowest", "metric": "che_acc_test"},
     "A the lowest che_acc_test among every variant"),
    ({"kind": "bound", "metric": "che_acc_test", "at_most": 0.6, "where": {"model.pos_encoding": "rope"}},
     "che_acc_test of every variant at most 0.6 where model.pos_encoding = rope"),
])
def test_a_claim_without_text_is_stated_from_its_fields(claim, words):
    parsed = TypeAdapter(Claim).validate_python({"id": "c", "source": "test", **claim})
    assert generated_statement(parsed) == words == parsed.statement
    written = TypeAdapter(Claim).validate_python({"id": "c", "source": "test", "text": "mine", **claim})
    assert written.statement == "mine"

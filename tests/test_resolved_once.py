"""One command resolves each row of its study once: the validation's resolved rows (study/trial_checks.py's
`resolved_rows`, kept on the study `load_study` returns) serve `expand`, the claims and the report, and
`orchestrator evaluate` expands the study once for its stored-run lookup and its report.

The commands run for real (a tiny study trained in this process with --local, then evaluated); a counting
wrapper around the pure functions that resolve a row (`validate_config` on a row's config, and
`Study.trial_config`, which resolved rows before) and around `expand` only counts the calls.
"""

from collections import Counter

import pytest
import yaml
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.study import trial_checks
from orchestrator.study.model import Study

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SPEC = {
    "name": "resolved_once",
    "base": {"model": {"preset": "tiny", "pos_encoding": "kerple", "d_dape": 4}, "data": {"max_files": 100},
             "train": {"steps": 2, "batch_size": 4, "seq_len": 32, "log_every": 1},
             "eval": {"lengths": [32], "tail_tokens": 16, "n_windows": 2}},
    "variants": [{"label": "Kerple", "baseline": True, "set": {"model.processor": "none"}},
                 {"label": "DAPE", "set": {"model.processor": "dapev2"}}],
    "seeds": [0, 1],
    "resources": {"cpus": 1, "max_retries": 0},
}
ROWS = ["variants[0] (Kerple)", "variants[1] (DAPE)"]


@pytest.fixture
def resolutions(monkeypatch) -> Counter:
    """How often each row (by its `where`) is resolved into a validated config, by either function."""
    counts: Counter = Counter()
    validate, trial_config = trial_checks.validate_config, Study.trial_config
    where_of = {tuple(sorted(variant["set"].items())): where for variant, where in zip(SPEC["variants"], ROWS)}

    def counting_validate(config, where):
        counts[where] += 1
        return validate(config, where)

    def counting_trial_config(self, overrides):
        row = tuple(sorted((key, value) for key, value in overrides.items() if key != "train.seed"))
        counts[where_of.get(row, repr(row))] += 1
        return trial_config(self, overrides)

    monkeypatch.setattr(trial_checks, "validate_config", counting_validate)
    monkeypatch.setattr(Study, "trial_config", counting_trial_config)
    return counts


@pytest.fixture
def study_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "resolved_once.yaml"
    path.write_text(yaml.safe_dump(SPEC, sort_keys=False))
    return path


def _rows_only(counts: Counter) -> dict:
    return {where: count for where, count in counts.items() if where in ROWS}


def test_plan_and_validate_resolve_each_row_once(study_file, resolutions):
    result = CliRunner().invoke(app, ["plan", str(study_file)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "of 4 estimate(s)" in result.output  # 2 rows x 2 seeds, all expanded
    assert _rows_only(resolutions) == {where: 1 for where in ROWS}
    resolutions.clear()
    result = CliRunner().invoke(app, ["validate", str(study_file)])
    assert "valid, 4 trial(s)" in result.output, result.output
    assert _rows_only(resolutions) == {where: 1 for where in ROWS}


@pytest.mark.slow
def test_run_resolves_each_row_once_and_evaluate_expands_once(study_file, resolutions, monkeypatch, tmp_path):
    from orchestrator import run_context
    from orchestrator.reporting import results
    from orchestrator.trial import trials

    expansions: list[str] = []

    def counting_expand(study, stored):  # the study expanded with the seeds a --decide run added (none here)
        expansions.append(study.name)
        return trials.expand_stored(study, stored)

    monkeypatch.setattr(run_context, "expand_stored", counting_expand)  # evaluate's context (RunContext.open)
    monkeypatch.setattr(results, "expand_stored", counting_expand)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    folders = ["--tracking-uri", uri, "--reports-dir", str(tmp_path / "reports")]
    result = CliRunner().invoke(app, ["run", str(study_file), "--local", *folders,
                                      "--storage-dir", str(tmp_path / "state")])
    assert result.exit_code == 0, result.output
    assert "4 run, 0 failed" in result.output
    assert _rows_only(resolutions) == {where: 1 for where in ROWS}  # validation, run and report: once
    assert expansions == []  # the report read the run's rows

    resolutions.clear()
    result = CliRunner().invoke(app, ["evaluate", str(study_file), "--lengths", "64", "--local", *folders])
    assert result.exit_code == 0, result.output
    assert "Evaluating 4 stored trial(s)" in result.output
    assert _rows_only(resolutions) == {where: 1 for where in ROWS}
    assert expansions == ["resolved_once"]  # the stored-run lookup and the report share one expansion

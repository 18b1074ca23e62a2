"""A command's invocation is one context (orchestrator/run_context.py) carried through run, decide, evaluate and
report, and the tracking store is opened once per command: every step reads and writes through the context's store.

The spy wraps the real StudyStore's constructor (both doors, `create` and `open`, construct through it) and counts
the stores made while one real command runs; nothing is replaced."""

from __future__ import annotations

import copy
import inspect

import pytest
import yaml
from test_evaluate import BASE, VARIANTS, _runs  # the evaluate tests' tiny study and helpers
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.tracking.readers import SQLiteReader
from orchestrator.tracking.store import StudyStore

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def stores_made(monkeypatch) -> list[str]:
    """The study names of the StudyStores constructed meanwhile, and "file" for each direct reader of a SQLite
    file (tracking/readers.py: what a store, the plan's measured steps and the report's decide note read through):
    the real constructors, counted."""
    made: list[str] = []
    real_store, real_reader = StudyStore.__init__, SQLiteReader.__init__

    def store(self, tracking_uri, study_name, *args, **kwargs):
        made.append(study_name)
        real_store(self, tracking_uri, study_name, *args, **kwargs)

    def reader(self, *args, **kwargs):
        made.append("file")
        real_reader(self, *args, **kwargs)

    monkeypatch.setattr(StudyStore, "__init__", store)
    monkeypatch.setattr(SQLiteReader, "__init__", reader)
    return made


def test_the_run_path_takes_the_context_not_its_fields():
    # Structural: each step of the run path takes the context, and none repeats its fields as arguments.
    from orchestrator.decide_loop import decide_and_report
    from orchestrator.evaluation.runner import evaluate_study, plan_tasks
    from orchestrator.execution.runner import run_study
    from orchestrator.reporting.build import build_report
    from orchestrator.run import evaluate_later, run_and_report
    from orchestrator.run_context import RunContext

    fields = set(RunContext.__dataclass_fields__) | {"tracking_uri", "trials", "expanded"}
    for step in (run_study, run_and_report, decide_and_report, evaluate_later, evaluate_study, plan_tasks,
                 build_report):
        parameters = list(inspect.signature(step).parameters)
        assert parameters[0] == "context", (step.__name__, parameters)
        assert not fields & set(parameters), (step.__name__, fields & set(parameters))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_one_run_opens_the_store_once_through_training_evaluation_and_report(tmp_path, monkeypatch, stores_made):
    # `report.lengths`: the trials score 128 themselves, the evaluation step finds nothing left (it reads the
    # store), then the run writes the report; before the
    # context carried the store, that evaluation opened the store a second time, and the measured steps and the
    # report's decide note each read the file through readers of their own. A claim: the report notes what
    # `--decide` would add (one seed, so it is untested).
    monkeypatch.chdir(tmp_path)
    spec = {"name": "once", "base": copy.deepcopy(BASE), "variants": VARIANTS,
            "resources": {"cpus": 1, "max_retries": 0}, "report": {"lengths": [128]},
            "expect": [{"id": "wider", "kind": "compare", "source": "test", "variant": "DAPE1x3", "direction": "below",
                        "metric": "ppl", "at": 64}]}
    path = tmp_path / "once.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    common = ["--tracking-uri", uri, "--reports-dir", str(tmp_path / "reports")]
    result = CliRunner().invoke(app, ["run", str(path), "--local", "--storage-dir", str(tmp_path / "state"), *common])
    assert result.exit_code == 0, result.output
    assert "report.lengths: " not in result.output  # the trials scored them: the evaluation step had nothing ...
    # ... in the store the run created: one store for the command, read through one reader of its file (the
    # measured steps that order the trials and the report's note on deciding by seeds read through it too)
    assert sorted(stores_made) == ["file", "once"], stores_made
    assert all("ppl_128" in run.data.metrics for run in _runs(uri, "once").values())
    assert "would train about" in (tmp_path / "reports" / "once" / "report.md").read_text()  # the decide note

    # `evaluate` and `report`: one store each too (the evaluation, then the report it rebuilds).
    stores_made.clear()
    result = CliRunner().invoke(app, ["evaluate", str(path), "--local", "--lengths", "256", *common])
    assert result.exit_code == 0, result.output
    assert "2 trial(s) evaluated" in result.output, result.output
    assert sorted(stores_made) == ["file", "once"], stores_made
    stores_made.clear()
    result = CliRunner().invoke(app, ["report", str(path), *common])
    assert result.exit_code == 0, result.output
    assert sorted(stores_made) == ["file", "once"], stores_made

"""tracking/readers.py: the direct SQLite reader returns what MLflow's client returns, reads only a store of a
schema revision it is tested with, and hands any other store to MLflow's client, which then reads it (with
the same results) or refuses it in one paragraph. Real MLflow SQLite stores, written by the orchestrator's
own recorder (tests/synthetic_store.py) plus a running trial with a NaN metric; the other revisions are
MLflow's own: the one before 3.17's in its migration chain."""

import logging
import math
import shutil
import sqlite3
from contextlib import closing

import pytest
from cli_support import run_cli
from mlflow.tracking import MlflowClient
from synthetic_store import write_store

from orchestrator import load_study
from orchestrator.errors import StoreUnusable
from orchestrator.tracking import StudyStore, readers
from orchestrator.tracking.readers import ClientReader, SQLiteReader, reader_for
from orchestrator.tracking.store import ROLE_TAG, TRIAL_ID_TAG

STUDY = "studies/leakage.yaml"  # four trials (two encodings, the tril on and off)
PREVIOUS_REVISION = "75868b020152"  # the down_revision of MLflow 3.17's head (dc11669786a5) in its migrations


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """(tracking URI, study name, file) of a real store: the study's trials as a run records them, and one
    trial left RUNNING whose last loss was NaN."""
    path = tmp_path_factory.mktemp("readers") / "mlruns" / "mlflow.db"
    study = load_study(STUDY)
    uri = f"sqlite:///{path}"
    written = write_store(study, uri)
    run_id = written.create_trial_run("still running", {TRIAL_ID_TAG: "t-running"}, {"train.steps": 5})
    written.log_metrics(run_id, {"train_loss": 2.5}, step=1, timestamp_ms=1_700_000_000_000)
    written.log_metrics(run_id, {"train_loss": math.nan}, step=2, timestamp_ms=1_700_000_000_001)
    return uri, study.name, path


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def _points(history) -> list[tuple]:
    return [(p.key, p.step, "nan" if math.isnan(p.value) else p.value, p.timestamp) for p in history]


def _assert_same_reads(ours, theirs, name: str) -> None:
    """Every read the orchestrator makes gives the same records through both readers."""
    assert ours.experiment(name) == theirs.experiment(name)
    assert ours.experiment("no_such_study") is None is theirs.experiment("no_such_study")
    experiment_id = ours.experiment(name)[0]
    assert ours.experiment_ids() == theirs.experiment_ids()
    assert ours.deleted(experiment_id) is theirs.deleted(experiment_id) is False
    for role in ("trial", "study"):
        mine, others = ours.runs(experiment_id, ROLE_TAG, role), theirs.runs(experiment_id, ROLE_TAG, role)
        assert [r.info.run_id for r in mine] == [r.info.run_id for r in others] and mine
        for a, b in zip(mine, others):
            assert (a.info.run_name, a.info.status, a.info.start_time, a.info.end_time, a.info.artifact_uri) == \
                (b.info.run_name, b.info.status, b.info.start_time, b.info.end_time, b.info.artifact_uri)
            assert a.data.tags == b.data.tags and a.data.params == b.data.params
            assert a.data.metrics.keys() == b.data.metrics.keys()
            assert all(_same(a.data.metrics[key], b.data.metrics[key]) for key in a.data.metrics)
            for key in ("train_loss", "ppl_by_length"):
                assert _points(ours.metric_history(a.info.run_id, key)) == \
                    _points(theirs.metric_history(a.info.run_id, key))
    assert any(math.isnan(run.data.metrics.get("train_loss", 0.0))
               for run in ours.runs(experiment_id, ROLE_TAG, "trial"))


def test_the_installed_mlflow_creates_a_revision_the_direct_reader_is_tested_with(store):
    uri, name, _ = store
    reader = reader_for(uri)
    assert isinstance(reader, SQLiteReader)
    from mlflow.store.db.utils import _get_latest_schema_revision

    head = _get_latest_schema_revision()
    assert reader.revision() == head, "a store of this MLflow's schema must be read directly"
    assert head in readers.TESTED_REVISIONS, (
        f"this MLflow creates stores of revision {head}: run tests/test_readers.py and add it to TESTED_REVISIONS")


def test_the_direct_reader_returns_what_mlflows_client_returns(store):
    uri, name, path = store
    _assert_same_reads(reader_for(uri), ClientReader(MlflowClient(uri)), name)


def test_a_store_of_an_untested_revision_is_read_through_mlflows_client_with_the_same_results(store, monkeypatch,
                                                                                               caplog):
    """As a direct reader tested with an earlier MLflow meets a store a later MLflow migrated: the reader here
    is told it was tested with the revision before 3.17's only, and meets 3.17's store, which MLflow reads."""
    uri, name, path = store
    monkeypatch.setattr(readers, "TESTED_REVISIONS", frozenset({PREVIOUS_REVISION}))
    with caplog.at_level(logging.WARNING, logger=readers.__name__):
        fallback = reader_for(uri)
        opened = StudyStore.open(uri, name)
    assert isinstance(fallback, ClientReader) and isinstance(opened.reader, ClientReader)
    lines = [record.getMessage() for record in caplog.records if record.name == readers.__name__]
    assert len(lines) == 2, lines  # one line per store read
    assert lines[0] == (f"The tracking store {path} has MLflow schema revision {SQLiteReader(path).revision()}, "
                        f"not {PREVIOUS_REVISION} that the direct reader is tested with: reading it through "
                        "MLflow's client (slower).")
    _assert_same_reads(SQLiteReader(path), fallback, name)  # the fast path on the same, normal store
    monkeypatch.undo()  # the same store, opened as the tested revision is
    direct = StudyStore.open(uri, name)
    assert isinstance(direct.reader, SQLiteReader)
    assert [r.info.run_id for r in opened.trial_runs()] == [r.info.run_id for r in direct.trial_runs()]
    assert opened.finished_trial_ids() == direct.finished_trial_ids() and len(direct.finished_trial_ids()) == 4


def test_a_store_mlflow_wants_upgraded_is_refused_in_one_paragraph_and_left_as_it_was(store, tmp_path, capsys):
    """A store last migrated by an earlier MLflow (its revision row the one before 3.17's): not read directly,
    and MLflow 3.17's client refuses it; every reading command says so, with MLflow's advice, and writes nothing."""
    _, name, path = store
    older = tmp_path / "mlflow.db"
    shutil.copyfile(path, older)
    with closing(sqlite3.connect(older)) as db:
        db.execute("UPDATE alembic_version SET version_num = ?", (PREVIOUS_REVISION,))
        db.commit()
    before = older.read_bytes()
    uri = f"sqlite:///{older}"
    with pytest.raises(StoreUnusable) as refused:
        StudyStore.open(uri, name)
    message = " ".join(str(refused.value).split())
    assert message.startswith(f"The tracking store {older} cannot be used: MLflow's client refuses it too: "
                              f"Detected out-of-date database schema (found version {PREVIOUS_REVISION}")
    assert "mlflow db upgrade" in message
    for command in ("status", "plan", "report"):
        code, output = run_cli(capsys, command, STUDY, "--tracking-uri", uri, *(
            ["--reports-dir", tmp_path / "reports"] if command == "report" else []))
        assert code == 2, (command, output)
        assert f"The tracking store {older} cannot be used: MLflow's client refuses it too" in " ".join(output.split())
        assert "Traceback" not in output, output
    assert older.read_bytes() == before

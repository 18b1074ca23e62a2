"""A library file edited while a study runs (issue 56, item 3): each trial's process checks its files on disk
against the fingerprint its run is tagged with, where it built its model (its first step) and before it reports
its result (orchestrator/execution/trainable.py CodeGuard); a trial whose files changed fails naming them, is
never recorded as FINISHED under the old fingerprint, and is trained again by the next `run`.

The edit is injected by the study's plugin: a processor that appends a statement to a file of the trial's code
(the Kerple encoding's, in a copy of the library the fingerprint reads) when its model is built, or when the
trial evaluates (after the first step's check)."""

import sqlite3
from pathlib import Path

import pytest
import yaml
from cli_support import run_cli
from test_code_identity import _copied_library
from test_plugins import registry_restored  # noqa: F401 - the plugins each test loads are forgotten after it

from orchestrator.study import code_identity

EDITING = """
from pathlib import Path

import torch
from dape_core.components import Cost, Processor, register_processor
from dape_core.processors.base import ScoreProcessor

TARGET, MODE, DONE = Path({target!r}), Path({mode!r}), Path({done!r})


def edit(when):  # once: the file stays edited
    if MODE.read_text() == when and not DONE.exists():
        DONE.write_text("edited")
        TARGET.write_text(TARGET.read_text() + "\\nEDITED_WHILE_RUNNING = 1\\n")


class Editing(ScoreProcessor):
    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(()))

    def forward(self, scores, bias, q_pos, k_pos):
        if not self.training:
            edit("eval")
        return scores + bias * self.weight


def build(cfg, has_bias):
    edit("build")
    return Editing()


register_processor(Processor("editing", "editing", build, cost=lambda cfg: Cost(1, 1)))
"""

CHANGED = "dape_core/encodings/kerple_torch.py changed on disk while the study ran"


def _study(folder: Path, target: Path) -> Path:
    (folder / "editing.py").write_text(EDITING.format(target=str(target), mode=str(folder / "mode"),
                                                      done=str(folder / "done")))
    spec = {"name": "edited", "plugins": ["editing.py"],
            "base": {"model": {"preset": "tiny", "pos_encoding": "kerple", "processor": "editing", "d_dape": 8},
                     "data": {"source": "stdlib", "max_files": 40},
                     "train": {"seq_len": 32, "batch_size": 4, "steps": 3, "device": "cpu"},
                     "eval": {"lengths": [32], "tokens_per_length": 1024}},
            "variants": [{"label": "Editing"}]}
    path = folder / "edited.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _trial_runs(db: Path) -> list[tuple[str, str, str]]:
    """(status, code fingerprint tag, error tag) of each trial run."""
    with sqlite3.connect(db) as connection:
        return sorted(connection.execute(
            "SELECT r.status, c.value, COALESCE(e.value, '') FROM runs r "
            "JOIN tags t ON t.run_uuid = r.run_uuid AND t.key = 'orchestrator.role' AND t.value = 'trial' "
            "JOIN tags c ON c.run_uuid = r.run_uuid AND c.key = 'orchestrator.code_fingerprint' "
            "LEFT JOIN tags e ON e.run_uuid = r.run_uuid AND e.key = 'error'").fetchall())


@pytest.mark.slow
def test_a_file_edited_while_a_trial_runs_fails_it_by_name_and_the_next_run_trains_it(tmp_path, capsys,
                                                                                        monkeypatch):
    copy = _copied_library(tmp_path)  # the library the fingerprints read (the driver's and the trial's)
    monkeypatch.setattr(code_identity, "library_root", lambda: copy)
    code_identity.forget_cached()
    monkeypatch.chdir(tmp_path)
    study = _study(tmp_path, copy / "encodings" / "kerple_torch.py")
    try:
        # Edited when the trial builds its model: seen at its first step.
        (tmp_path / "mode").write_text("build")
        db = tmp_path / "build.db"
        code, output = run_cli(capsys, "run", study, "--local", "--tracking-uri", f"sqlite:///{db}")
        assert code != 0 and CHANGED in output and "seen at the trial's first step" in output, output
        [(status, failed_code, error)] = _trial_runs(db)
        assert status == "FAILED" and error.startswith(f"CodeChangedError: {CHANGED}"), error
        assert not list((tmp_path / ".orchestrator").rglob("*.pt")), "no checkpoint of the edited code is kept"

        # The next run fingerprints the edited file: the failed trial is trained again, under its new fingerprint.
        code_identity.forget_cached()  # as a new command's process would
        code, output = run_cli(capsys, "run", study, "--local", "--tracking-uri", f"sqlite:///{db}")
        assert code == 0 and "0 trial(s) reused, 1 run" in output, output
        codes = {status: code for status, code, _ in _trial_runs(db)}
        assert set(codes) == {"FINISHED", "FAILED"} and codes["FINISHED"] != codes["FAILED"] == failed_code

        # Edited while the trial evaluates, after its first step's check: seen before its result is reported.
        (tmp_path / "done").unlink()
        (tmp_path / "mode").write_text("eval")
        db = tmp_path / "eval.db"
        code_identity.forget_cached()
        code, output = run_cli(capsys, "run", study, "--local", "--tracking-uri", f"sqlite:///{db}")
        assert code != 0 and CHANGED in output and "seen before its result was reported" in output, output
        assert [status for status, _, _ in _trial_runs(db)] == ["FAILED"]
    finally:
        code_identity.forget_cached()

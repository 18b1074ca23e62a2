"""The report's figures drawn side by side (reporting/drawing.py): each job in a forked process where that is
safe, the results in the jobs' order, the same figure files as drawn one after the other; a job whose process
failed is run again here, where its error is raised."""

import os
import threading
import time

import pytest

from orchestrator.reporting import drawing

# pytest-timeout's "thread" method runs a thread beside each test, and drawing.py never forks a process with
# other threads: these tests are bounded by a signal instead.
pytestmark = [pytest.mark.skipif("fork" not in drawing.multiprocessing.get_all_start_methods(),
                                 reason="forks only on a platform that forks"),
              pytest.mark.timeout(120, method="signal")]


def _pid_after(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def test_jobs_run_in_forked_processes_and_come_back_in_order():
    pids = drawing.draw([lambda: _pid_after(0.3), lambda: _pid_after(0.0), lambda: _pid_after(0.1)], workers=2)
    assert len(pids) == 3 and os.getpid() not in pids and len(set(pids)) == 3


def test_a_failed_job_is_run_again_here_and_raises_its_error():
    here = os.getpid()
    runs = []

    def flaky():
        runs.append(os.getpid())  # the child's list is its own: here, only the rerun is seen
        if os.getpid() != here:
            raise RuntimeError("the child failed")
        return "drawn here"

    assert drawing.draw([flaky, lambda: "fine"], workers=2) == ["drawn here", "fine"] and runs == [here]

    def broken():
        raise ValueError("no such column")

    with pytest.raises(ValueError, match="no such column"):
        drawing.draw([broken, lambda: 1], workers=2)


def test_a_process_with_other_threads_draws_here_one_after_the_other():
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        assert not drawing.can_fork()
        assert drawing.draw([os.getpid, os.getpid], workers=2) == [os.getpid()] * 2
    finally:
        stop.set()
        other.join()


def test_a_report_drawn_side_by_side_has_the_figures_drawn_one_after_the_other(tmp_path, monkeypatch):
    import synthetic_store
    from test_rerun import SPEC

    from orchestrator import parse_study
    from orchestrator.reporting import build_report
    from orchestrator.run_context import RunContext

    study = parse_study({**SPEC, "axes": {"train.lr": [0.001, 0.002], "model.d_dape": [4, 8]}})  # heat maps too
    store = synthetic_store.write_store(study, f"sqlite:///{tmp_path / 'mlflow.db'}")
    made, draw = {}, drawing.draw
    for side_by_side in (True, False):
        forked = []
        monkeypatch.setattr(drawing, "draw", lambda jobs: forked.append(drawing.can_fork()) or draw(jobs))
        monkeypatch.setattr(drawing, "usable_cores", lambda: 2 if side_by_side else 1)
        report = build_report(RunContext.of(study, store), tmp_path / str(side_by_side), attach=False)
        assert forked == [True]
        made[side_by_side] = ([(plot.name, plot.title, plot.caption, plot.path.name) for plot in report.document.plots],
                              {path.name: path.read_bytes() for path in report.folder.glob("plots/*.png")},
                              report.markdown.replace(str(tmp_path / str(side_by_side)), ""))
    assert len(made[True][1]) >= 4 and made[True] == made[False]

"""The order trials go to Ray Tune (planning/schedule.py): their evaluation counts in their duration (their own
lengths and the report.lengths they score themselves), and on a known number of slots the order with the shortest
simulated makespan is taken (LPT's unless another ends sooner)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.planning.schedule import estimated_seconds, longest_first, makespan, packed
from orchestrator.study.load import load_study
from orchestrator.trial.trials import expand

KERNEL_SIZE = Path(__file__).resolve().parents[1] / "studies" / "kernel_size.yaml"


def test_makespan_is_tunes_list_scheduling():
    assert makespan([4, 3, 2, 2, 1], 2) == 6  # 4+2, 3+2+1
    assert makespan([3, 3, 4, 2], 2) == 7  # 3+4, 3+2: the slot that frees first takes the next, however long
    assert makespan([5, 1], 3) == 5 and makespan([2, 2, 2], 1) == 6


def test_the_evaluation_counts_in_a_trials_duration():
    study = load_study(KERNEL_SIZE)
    for trial in expand(study):
        without, own = estimated_seconds(trial, study, None), estimated_seconds(trial, study, None, [1024])
        assert own > without > 0, trial.label
    # The 1024-token windows cost more where the processor's maps are wider: the gap grows with the kernel.
    gaps = [estimated_seconds(t, study, None, [1024]) - estimated_seconds(t, study, None) for t in expand(study)]
    assert gaps == sorted(gaps)  # the study's rows: Kerple, then DAPE 1x1, 1x3, 1x5, 1x7


def test_packing_on_two_slots_ends_sooner_than_longest_first():
    study = load_study(KERNEL_SIZE)
    trials = expand(study)
    later = {trial.trial_id: [1024] for trial in trials}
    lpt = longest_first(trials, study, None, later)
    best = packed(trials, study, None, later, slots=2)

    def span(order):
        return makespan([estimated_seconds(t, study, None, later[t.trial_id]) for t in order], 2)

    assert sorted(t.trial_id for t in best) == sorted(t.trial_id for t in trials)
    assert span(best) < span(lpt) and best[0].label == lpt[0].label == "DAPE1x7-Kerple"
    for slots in (0, 1, 5):  # unknown, one at a time, all at once: longest first
        assert packed(trials, study, None, later, slots=slots) == lpt


def test_the_plan_counts_each_trials_evaluation_and_says_the_local_makespan(tmp_path, monkeypatch):
    """`orchestrator plan`'s est. time is a trial's training and its evaluation (its eval.lengths and the
    report.lengths it scores itself), as `run` orders the trials by; the summary splits the two and, on this
    machine's private local Ray (2 slots here), gives the packed makespan of the trials still to run; the SLURM
    sizing counts each trial whole too."""
    import re

    from typer.testing import CliRunner

    from orchestrator.cli import app
    from orchestrator.evaluation.in_trial import later_lengths_for
    from orchestrator.planning.plan_table import summary_lines
    from orchestrator.planning.plan_view import plan_rows
    from orchestrator.planning.schedule import best_order, local_slots
    from orchestrator.slurm.sizing import study_work

    study = load_study(KERNEL_SIZE)
    trials = expand(study)
    later = later_lengths_for(study, trials)
    assert all(later[trial.trial_id] == [1024] for trial in trials)  # report.lengths: 16x = 1024
    rows = plan_rows(study, None, set())
    for row, trial in zip(rows, trials):
        assert row.eval_seconds > 0 and row.total == pytest.approx(
            estimated_seconds(trial, study, None, later[trial.trial_id]))
    work = study_work(study)
    assert [seconds for _, seconds in work.trials] == pytest.approx([row.total for row in rows])
    lines = summary_lines(study, rows, slots=2)
    training, evaluation = sum(r.seconds for r in rows), sum(r.eval_seconds for r in rows)
    assert "(training " in lines[0] and "evaluation " in lines[0]
    span = makespan([rows[i].total for i in best_order([r.total for r in rows], 2)], 2)
    assert (training + evaluation) / 2 <= span < training + evaluation and "2 trials at a time" in lines[1]
    assert summary_lines(study, rows, slots=0)[1:] == lines[2:]  # no line where the slots are not known
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert local_slots(study.resources) == 2
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert local_slots(study.resources) == 0
    monkeypatch.delenv("RAY_ADDRESS")
    result = CliRunner().invoke(app, ["plan", str(KERNEL_SIZE), "--tracking-uri", f"sqlite:///{tmp_path}/none.db"])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert re.search(r"Estimated time, one trial at a time on 1 CPU per worker: \S+ \(training \S+, evaluation \S+;",
                     said), said[:2000]
    assert "On this machine's private local Ray, 2 trials at a time" in said

"""`orchestrator run`/`evaluate` start the evaluation tasks longest first (evaluation/runner.py `longest_first`),
by the planner's FLOP count of each task's lengths; a task whose config cannot be priced keeps its place."""

from __future__ import annotations

from pathlib import Path

from orchestrator.evaluation.request import TrialTask
from orchestrator.evaluation.runner import estimated_cost, longest_first
from orchestrator.study.load import load_study
from orchestrator.trial.trials import expand

STUDY = Path(__file__).resolve().parents[1] / "studies" / "kernel_size.yaml"


def _task(trial, lengths: list[int]) -> TrialTask:
    return TrialTask(run_id=trial.label, run_name=trial.run_name, trial_id=trial.trial_id, artifact_uri="",
                     config=trial.config, lengths=lengths, suffix="", eval_section={}, threads=1)


def test_evaluation_tasks_start_longest_first():
    trials = {trial.label: trial for trial in expand(load_study(STUDY))}
    in_study_order = [_task(trials[label], [1024]) for label in
                      ("Kerple", "DAPE-Kerple", "DAPE1x3-Kerple", "DAPE1x5-Kerple", "DAPE1x7-Kerple")]
    ordered = [task.run_id for task in longest_first(in_study_order)]
    assert ordered == ["DAPE1x7-Kerple", "DAPE1x5-Kerple", "DAPE1x3-Kerple", "DAPE-Kerple", "Kerple"]
    # more lengths to score cost more; a config that cannot be priced costs 0 and keeps its place among equals
    longer = _task(trials["Kerple"], [1024, 2048])
    unpriced = TrialTask(run_id="unpriced", run_name="?", trial_id="?", artifact_uri="", config={"model": 1},
                         lengths=[4096], suffix="", eval_section={}, threads=1)
    assert estimated_cost(longer) > estimated_cost(in_study_order[0]) and estimated_cost(unpriced) == 0.0
    assert [t.run_id for t in longest_first([unpriced, in_study_order[0], longer])] == ["Kerple", "Kerple", "unpriced"]
    assert longest_first([unpriced, in_study_order[0], longer])[0] is longer

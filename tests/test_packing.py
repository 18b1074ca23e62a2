"""The order trials go to Ray Tune (planning/schedule.py): their evaluation counts in their duration (their own
lengths and the report.lengths they score themselves), and on a known number of slots the order with the shortest
simulated makespan is taken (LPT's unless another ends sooner)."""

from __future__ import annotations

from pathlib import Path

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

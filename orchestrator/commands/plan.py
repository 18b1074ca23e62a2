"""`orchestrator plan`: the expanded trial table with costs and what is already finished; launches nothing.
The rows are planning/plan_view.py's, their table planning/plan_table.py's."""

from __future__ import annotations

from .invocation import Invocation
from .output import console


def plan(invocation: Invocation, explain: bool = True) -> None:
    """`explain`: the notes in full (how each column is estimated, each claim's expected seeds, the weights
    kept); else two lines of them."""
    from ..planning.learned import load_measured
    from ..planning.plan_table import plan_table, summary_lines, weights_line
    from ..planning.plan_view import legend, plan_rows, search_note, short_legend
    from ..tracking.uri import store_missing

    study = invocation.study
    store = invocation.stored()
    from ..study.code_identity import code_fingerprint
    from ..tracking.code_check import CURRENT, UNKNOWN, code_lines, store_code_check
    from ..trial.trials import expand

    trials = expand(study)
    code = store_code_check(store, trials, code_fingerprint(study.plugin_payloads())) if store else None
    # finished: the trials `run` reuses (their code is the current one, or unknown); stale ones are not
    finished = {trial_id for trial_id, state in code.states.items() if state in (CURRENT, UNKNOWN)} if code else set()
    # ms per step of the store's finished runs (any experiment), or None where there is no store yet
    measured = None if store_missing(invocation.uri) is not None else load_measured(invocation.uri)
    rows = plan_rows(study, measured, finished)
    console.print(plan_table(study, invocation.profile, rows))
    from ..planning.schedule import local_slots

    slots = local_slots(study.resources, max(trial.workers for trial in trials)) if trials else 0
    for line in summary_lines(study, rows, slots):
        console.print(line)
    for line in legend(study) if explain else search_note(study):
        console.print(line)
    from ..planning.seeds_needed import SeedRuns, load_seed_runs, plan_lines

    runs = load_seed_runs(invocation.uri) if measured is not None else SeedRuns()  # the seed-to-seed spreads
    for line in plan_lines(study, runs, measured, per_claim=explain):  # the claims' seeds and cost (run --decide)
        console.print(line, markup=False)
    if explain:
        console.print(weights_line(study, rows))
    for line in code_lines(code, trials) if code else []:
        console.print(line, markup=False)
    for line in [] if explain else short_legend():
        console.print(line, markup=False)

"""`orchestrator status`: each trial's state in the tracking store."""

from __future__ import annotations

from rich.table import Table

from .invocation import Invocation
from .output import console


def status(invocation: Invocation) -> None:
    from ..study.code_identity import code_fingerprint
    from ..tracking.code_check import check_code, code_lines, reused_from_others, store_code_check
    from ..tracking.store import STUDY_TAG, TRIAL_ID_TAG
    from ..trial.trials import StoredIdentities, expand_stored

    study = invocation.study
    store = invocation.stored()
    runs = store.latest_runs() if store else {}
    table = Table(title=f"{study.name}: {invocation.uri}")
    for column in ("trial", "id", "state", "code", "detail"):
        table.add_column(column)
    counts: dict[str, int] = {}
    rows = expand_stored(study, {run.data.tags.get(TRIAL_ID_TAG) for run in store.trial_runs()} if store else set())
    stored = StoredIdentities(rows)
    current = code_fingerprint(study.plugin_payloads())  # which finished trials the current code computed
    code = store_code_check(store, rows, current) if store else check_code(rows, [], current, lambda run: None)
    for trial_id, run in reused_from_others(code, rows, study.name).items():  # reused from another study
        runs[trial_id] = run
    for trial in rows:
        run = stored.lookup(trial, runs)
        state = run.info.status if run else "TO RUN"
        detail = (run.data.tags.get("error", "") if run else "")[:100]
        if run is not None and run.data.tags.get(STUDY_TAG, study.name) != study.name:
            detail = f"computed by study {run.data.tags[STUDY_TAG]} (run {run.info.run_id})"
        counts[state] = counts.get(state, 0) + 1
        table.add_row(trial.run_name, trial.trial_id, state, code.state(trial) or "", detail)
    console.print(table)
    console.print(", ".join(f"{count} {state.lower()}" for state, count in counts.items()))
    for line in code_lines(code, rows):
        console.print(line, markup=False)

"""One design per sequence of looks: `run --decide`'s design recorded on the study's parent run, and checked
when the sequence resumes.

The sequential rule's error rate holds for the looks it was planned with (decision.py): judging
the same seeds again under other looks, another alpha or another test (`shared_variance`; or raising
`max_seeds` after "undecided at max_seeds") re-runs the sequence with a second chance, and false verdicts
rise (0.048 -> 0.061 in the issue's simulation). So the design (the planned looks, alpha and the test) is
recorded on the study's parent run at the first look (tag DESIGN_TAG); a resumed `run --decide` with another
design is refused (exit 2, naming both), unless the user starts a new sequence explicitly (`--new-sequence`),
which the parent run records (NEW_SEQUENCE_TAG) and the report states. A budget is not part of the design:
it only stops the sequence earlier, which the rule allows.

A store written before designs were recorded has the design in its `looks.json` artifact (orchestrator/decide_loop.py):
the sequence resumes with that one and says so. `orchestrator report` judges the claims with the recorded
design where the study file has no `decide:` section, so that the report gives the loop's verdicts.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

from ..errors import UserInputError
from ..study import Decide

DESIGN_TAG = "decide.design"  # the parent run's tag: {"min_seeds", "max_seeds", "batch", "alpha"} as JSON (and
# "shared_variance": true where set)
NEW_SEQUENCE_TAG = "decide.new_sequence"  # set by --new-sequence: when, and the design it replaced
PLANNED_TAG = "decide.planned_trials"  # `plan`'s expected and ceiling trials before the first look: "30,50"
LOOKS_FILE = "looks.json"


def words(decide: Decide) -> str:
    """The design as the messages say it: "looks at 2, 4, 6, 8, 10 seeds, alpha 0.05" (", shared variance"
    where the claims share one variance estimate)."""
    shared = ", shared variance" if decide.shared_variance else ""
    return f"looks at {', '.join(map(str, decide.looks()))} seeds, alpha {decide.alpha:g}{shared}"


def _record(decide: Decide) -> str:
    fields = {"min_seeds": decide.min_seeds, "max_seeds": decide.max_seeds, "batch": decide.batch,
              "alpha": decide.alpha}
    if decide.shared_variance:  # recorded only where set: a record without it reads as the default (off)
        fields["shared_variance"] = True
    return json.dumps(fields, sort_keys=True)


def same(a: Decide, b: Decide) -> bool:
    return a.looks() == b.looks() and a.alpha == b.alpha and a.shared_variance == b.shared_variance


def _parent_tags(store: Any) -> tuple[str | None, dict[str, str]]:
    from ..tracking.store import ROLE_TAG

    runs = store.reader.runs(store.experiment_id, ROLE_TAG, "study")
    return (runs[0].info.run_id, dict(runs[0].data.tags)) if runs else (None, {})


def recorded(store: Any, artifacts: bool = True) -> tuple[Decide | None, str]:
    """The design the study's sequence was run with, and where it was read from ("" where none is
    recorded): the parent run's tag, else (a store from before designs were recorded; `artifacts`) its
    looks.json."""
    run_id, tags = _parent_tags(store)
    if DESIGN_TAG in tags:
        return Decide(**json.loads(tags[DESIGN_TAG])), "the design recorded on the study's run"
    if run_id is None or not artifacts:
        return None, ""
    try:
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory(prefix="orchestrator_design_") as folder:
            path = store.client.download_artifacts(run_id, LOOKS_FILE, folder)
            dumped = json.loads(Path(path).read_text(encoding="utf-8"))["decide"]
    except Exception:  # no looks.json: no sequence was run on this store
        return None, ""
    fields = {key: dumped[key] for key in ("min_seeds", "max_seeds", "batch", "alpha", "shared_variance")
              if key in dumped}
    return Decide(**fields), f"{LOOKS_FILE} (the store was written before designs were recorded on the study's run)"


def new_sequence_note(store: Any) -> str:
    """What the report says of a sequence restarted with --new-sequence ("" where none was)."""
    return _parent_tags(store)[1].get(NEW_SEQUENCE_TAG, "")


def check(store: Any, decide: Decide, new_sequence: bool) -> tuple[list[str], str]:
    """Before the first look of a (resumed) `run --decide`: (lines to say, the new-sequence note to record
    or ""); UserInputError (exit 2, nothing run) where the store's sequence ran with another design and
    `new_sequence` is not given."""
    earlier, source = recorded(store)
    if earlier is None:
        return [f"Decision design: {words(decide)} (recorded on the study's run at the first look)"], ""
    if same(earlier, decide):
        lines = [f"Decision design: {words(decide)}, as recorded"]
        if DESIGN_TAG not in _parent_tags(store)[1]:
            lines = [f"Decision design: {words(decide)}, the design this sequence was run with (read from "
                     f"{source}); now recorded on the study's run"]
        return lines, ""
    if not new_sequence:
        raise UserInputError(
            f"decide: this study's sequence of looks was run with {words(earlier)} ({source}); this run asks for "
            f"{words(decide)}. Judging the same seeds again under another design gives the claims a second chance "
            "and raises the error rate. Run it with the recorded design, or start a new sequence explicitly with "
            "--new-sequence (the report then says so). Nothing was run.")
    note = (f"A new sequence of looks was started on {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC with "
            f"{words(decide)} (run --decide --new-sequence), replacing {words(earlier)}: the verdicts are this "
            "design's, over every seed in the store, the earlier sequence's seeds included.")
    return [note], note


def planned(store: Any, compute: Callable[[], tuple[int, int]]) -> tuple[int, int]:
    """`plan`'s (expected, ceiling) trials as the sequence's first run recorded them (PLANNED_TAG), else
    `compute()`d now: a resumed sequence is checked against the plan made before it started."""
    text = _parent_tags(store)[1].get(PLANNED_TAG, "")
    try:
        expected, ceiling = (int(part) for part in text.split(","))
        return expected, ceiling
    except ValueError:
        return compute()


def record(store: Any, decide: Decide, note: str = "", planned: tuple[int, int] | None = None) -> None:
    """The design (a new sequence's note, `plan`'s expected and ceiling trials) as tags of the parent run."""
    if store.parent_run_id:
        tags = {DESIGN_TAG: _record(decide), **({NEW_SEQUENCE_TAG: note} if note else {})}
        if planned is not None and planned[1]:
            tags[PLANNED_TAG] = f"{planned[0]},{planned[1]}"
        store.set_tags(store.parent_run_id, tags)

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

The seeds are part of the sequence too: a look at n seeds reads the first n of `Decide.seed_order(seeds)`,
so the order is recorded beside the design (tag SEEDS_TAG), and a study whose `seeds:` now give another order
(seeds [0] -> [100]: looks that would read seeds 100, 101, ... instead of 0, 1, ...) is refused the same way.
`orchestrator report` holds the same lock (`report_check`): a study file whose `decide:` section or seeds differ
from the recorded sequence's is refused (exit 2, naming both), unless `report --new-sequence` judges it as a new
sequence, which the report states (and which it does not attach over the loop's verdicts).

A store written before designs were recorded has the design in its `looks.json` artifact (orchestrator/decide_loop.py):
the sequence resumes with that one and says so. `orchestrator report` judges the claims with the recorded
design where the study file has no `decide:` section, so that the report gives the loop's verdicts.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from ..errors import UserInputError
from ..study import Decide

DESIGN_TAG = "decide.design"  # the parent run's tag: {"min_seeds", "max_seeds", "batch", "alpha"} as JSON (and
# "shared_variance": true where set)
NEW_SEQUENCE_TAG = "decide.new_sequence"  # set by --new-sequence: when, and the design it replaced
SEEDS_TAG = "decide.seed_order"  # the seeds the sequence's looks read, in order (JSON list): Decide.seed_order
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
        with tempfile.TemporaryDirectory(prefix="orchestrator_design_") as folder:
            path = store.client.download_artifacts(run_id, LOOKS_FILE, folder)
            dumped = json.loads(Path(path).read_text(encoding="utf-8"))["decide"]
    except Exception:  # no looks.json: no sequence was run on this store
        return None, ""
    fields = {key: dumped[key] for key in ("min_seeds", "max_seeds", "batch", "alpha", "shared_variance")
              if key in dumped}
    return Decide(**fields), f"{LOOKS_FILE} (the store was written before designs were recorded on the study's run)"


def recorded_order(store: Any) -> list[int] | None:
    """The seeds the store's sequence read, in order (None: not recorded: no sequence, or one from before the
    order was recorded)."""
    text = _parent_tags(store)[1].get(SEEDS_TAG)
    return [int(seed) for seed in json.loads(text)] if text else None


def _other_seeds(earlier: list[int] | None, order: list[int] | None) -> bool:
    """The two orders read other seeds at some look both can take (a longer order, from a larger max_seeds,
    extends the same sequence)."""
    if earlier is None or order is None:
        return False
    common = min(len(earlier), len(order))
    return earlier[:common] != order[:common]


def _order_words(order: list[int]) -> str:
    return ", ".join(map(str, order[:4])) + (", ..." if len(order) > 4 else "")


def new_sequence_note(store: Any) -> str:
    """What the report says of a sequence restarted with --new-sequence ("" where none was)."""
    return _parent_tags(store)[1].get(NEW_SEQUENCE_TAG, "")


def check(store: Any, decide: Decide, new_sequence: bool, seeds: list[int] | None = None) -> tuple[list[str], str]:
    """Before the first look of a (resumed) `run --decide`: (lines to say, the new-sequence note to record
    or ""); UserInputError (exit 2, nothing run) where the store's sequence ran with another design, or read
    other seeds than the study's `seeds` give now, and `new_sequence` is not given."""
    earlier, source = recorded(store)
    if earlier is None:
        return [f"Decision design: {words(decide)} (recorded on the study's run at the first look)"], ""
    before = recorded_order(store)
    order = decide.seed_order(list(seeds)) if seeds is not None else None
    if same(earlier, decide) and _other_seeds(before, order):
        assert before is not None and order is not None
        if not new_sequence:
            raise UserInputError(
                f"decide: this study's sequence of looks read seeds {_order_words(before)} in that order (recorded on "
                f"the study's run); its seeds: now give {_order_words(order)}. Judging other seeds under the same "
                "sequence would quietly start a fresh one. Restore the study's seeds:, or start a new sequence "
                "explicitly with --new-sequence (the report then says so). Nothing was run.")
        note = (f"A new sequence of looks was started on {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC on "
                f"seeds {_order_words(order)} (run --decide --new-sequence), replacing the sequence on seeds "
                f"{_order_words(before)}, with {words(decide)}: the verdicts are this sequence's.")
        return [note], note
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


def report_check(store: Any, study: Any, new_sequence: bool, attach: bool) -> str:
    """Before `orchestrator report` judges the claims: "" where the study file judges them as the store's
    sequence ran (or none ran); UserInputError (exit 2, nothing written) where its `decide:` section or its
    seeds differ from the recorded sequence's, unless `new_sequence` (report --new-sequence): then the note
    the report states. With --attach a new sequence is refused: the study's run keeps the loop's verdicts
    (`run --decide --new-sequence` starts a sequence that records its own)."""
    earlier, source = recorded(store, artifacts=False)
    if earlier is None:
        if new_sequence:
            raise UserInputError("--new-sequence: no sequence of looks is recorded for this study, so there is none "
                                 "to start anew; report without it. Nothing was written.")
        return ""
    design = study.decide or earlier
    before, order = recorded_order(store), design.seed_order(list(study.seeds))
    other_design = study.decide is not None and not same(earlier, study.decide)
    other_seeds = _other_seeds(before, order)
    if not (other_design or other_seeds):
        return ""
    assert before is not None or not other_seeds
    then = words(earlier) + (f" on seeds {_order_words(before)}" if before is not None else "")
    now = words(design) + (f" on seeds {_order_words(order)}" if other_seeds else "")
    what = " and ".join(part for part in ("decide: section" if other_design else "",
                                          "seeds:" if other_seeds else "") if part)
    if not new_sequence:
        raise UserInputError(
            f"report: this study's claims were decided by a sequence of looks run with {then} ({source}); the "
            f"study file's {what} now ask for {now}. Judging the store again under another design or on other "
            "seeds re-judges the claims with a second chance (an undecided claim can come out decided) and raises "
            "the error rate. Restore the study's " + what + ", or judge it as a new sequence explicitly with "
            "--new-sequence (the report then says so; the study's run keeps the loop's verdicts). Nothing was "
            "written.")
    if attach:
        raise UserInputError(
            "report --new-sequence --attach: the study's run holds the verdicts of the sequence the loop ran "
            f"({then}); a report judged as a new sequence is not attached over them. Report without --attach, or "
            "start the new sequence with `run --decide --new-sequence`. Nothing was written.")
    return (f"Judged as a new sequence (report --new-sequence): {now}, not the sequence the claims were decided "
            f"by ({then}): these verdicts are not the loop's, and the study's run keeps the loop's.")


def planned(store: Any, compute: Callable[[], tuple[int, int]]) -> tuple[int, int]:
    """`plan`'s (expected, ceiling) trials as the sequence's first run recorded them (PLANNED_TAG), else
    `compute()`d now: a resumed sequence is checked against the plan made before it started."""
    text = _parent_tags(store)[1].get(PLANNED_TAG, "")
    try:
        expected, ceiling = (int(part) for part in text.split(","))
        return expected, ceiling
    except ValueError:
        return compute()


def record(store: Any, decide: Decide, note: str = "", planned: tuple[int, int] | None = None,
           order: list[int] | None = None) -> None:
    """The design (a new sequence's note, `plan`'s expected and ceiling trials, the seeds its looks read in
    `order`) as tags of the parent run."""
    if store.parent_run_id:
        tags = {DESIGN_TAG: _record(decide), **({NEW_SEQUENCE_TAG: note} if note else {})}
        if order is not None:
            tags[SEEDS_TAG] = json.dumps([int(seed) for seed in order])
        if planned is not None and planned[1]:
            tags[PLANNED_TAG] = f"{planned[0]},{planned[1]}"
        store.set_tags(store.parent_run_id, tags)

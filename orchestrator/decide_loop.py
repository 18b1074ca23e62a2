"""`orchestrator run STUDY --decide` (or a study with a `decide:` section): seeds added until the claims are decided.

Every row trains `min_seeds` seeds; the claims are judged (judging/claims.py's decision rule); then only the
rows that undecided claims read get `batch` more seeds, a planned look at a time (`Decide.looks()`), until every
claim is decided, `max_seeds` is reached or the budget (trials, or GPU-hours of the plan's analytic estimate)
would be overspent. A claim decided at a look keeps that decision: its rows train more seeds only where another,
undecided claim reads them.

Each look is an ordinary run of the study's trials (run.py's `run_trials`, on Ray, a cluster, SLURM or
`--local`) over the trials planned so far, each scoring the study's `report.lengths` itself, followed by the
scoring of those they still lack (run.py's `evaluate_later`, so that claims at those lengths are judged at every
look), so finished trials are skipped by their identity (config hash with its seed) and nothing is trained twice.
The sequence keeps no state of its own: it is recomputed from the store, look by look, judging each look on exactly
the seeds that look planned, so a rerun after Ctrl-C, a killed driver or a SLURM requeue takes the same looks and
reaches the same decisions. Each look is recorded on the study's MLflow parent run: metrics at step = look index
(LOOK_METRICS) and the artifact `looks.json` (every look so far).

A trial that fails stops only the claims that read it ("a trial it reads failed"); the others go on.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

from .errors import StaleTrials, UserInputError
from .execution.runner import StudyOutcome
from .judging import design as decide_design
from .judging.judged import claim_rows, judge, not_decidable
from .reporting.build import build_report
from .run import evaluate_later, run_trials
from .run_context import RunContext
from .study import Decide, Study
from .study.code_identity import changed_since, code_fingerprint
from .study.decide_checks import decide_problems
from .trial.trials import Trial, distinct, expand

LOOKS_FILE = "looks.json"  # the parent run's artifact: every look so far
# The parent run's metrics, one point per look (step = the look's index).
LOOK_SEEDS, LOOK_TRIALS, LOOK_GPU_HOURS = "decide_look_seeds", "decide_trials", "decide_gpu_hours"
LOOK_DECIDED, LOOK_WAITING = "decide_claims_decided", "decide_claims_waiting"
LOOK_METRICS = (LOOK_SEEDS, LOOK_TRIALS, LOOK_GPU_HOURS, LOOK_DECIDED, LOOK_WAITING)

# What became of a claim in the sequence.
DECIDED, WAITING, NOT_DECIDABLE, TRIAL_FAILED = "decided", "waiting on more seeds", "not decidable by seeds", "stopped"
MAX_REACHED, BUDGET_SPENT = "undecided at max_seeds", "undecided: budget spent"
NOT_BY_SEEDS = "undecided: waiting on something seeds do not give"  # its reason says what (orchestrator evaluate ...)


class CodeChangedDuringSequence(StaleTrials):
    """The code changed on disk between two looks of a sequence (exit 2)."""


# --- the sequence -------------------------------------------------------------------------------------------
@dataclass
class ClaimState:
    """A claim's place in the sequence: its status (DECIDED, WAITING, ...), and its last judgement."""

    id: str
    status: str
    rows: list[str]
    verdict: str = ""
    seeds: int = 0
    look: int | None = None  # the look that settled it
    reason: str = ""
    effect: str = ""
    p: float | None = None
    p_holm: float | None = None


@dataclass
class Look:
    index: int
    seeds: int  # the planned seed count of this look
    rows: list[str]  # the rows that trained up to `seeds` seeds at this look
    trials: int  # distinct trials planned so far (every row's seeds)
    gpu_hours: float  # their estimated GPU-hours (analytic)
    claims: list[ClaimState] = field(default_factory=list)
    stopped: str = ""  # why no later look was taken, on the last look


@dataclass
class Sequence:
    decide: Decide
    looks: list[Look] = field(default_factory=list)
    claims: dict[str, ClaimState] = field(default_factory=dict)
    note: str = ""  # a new sequence started with --new-sequence (judging/design.py)
    planned: tuple[int, int] = (0, 0)  # `plan`'s expected and ceiling trials before the first look
    order: list[int] = field(default_factory=list)  # the seeds the looks read, in order (Decide.seed_order)

    def plan_versus_used(self) -> str:
        used = self.looks[-1].trials if self.looks else 0
        return f"plan said expected {self.planned[0]} trials (ceiling {self.planned[1]}); used {used}"

    def waiting(self) -> list[ClaimState]:
        return [state for state in self.claims.values() if state.status == WAITING]

    def record(self) -> dict:
        planned = {"expected_trials": self.planned[0], "ceiling_trials": self.planned[1]}
        return {"decide": self.decide.model_dump(), "planned": planned, "looks": [asdict(look) for look in self.looks],
                "claims": [asdict(state) for state in self.claims.values()]}


def with_decide(study: Study, requested: bool) -> Study | None:
    """The study as the sequence runs it (its `decide:` section, or the defaults where `--decide` asks for one),
    or None where neither asks; UserInputError (exit 2, nothing run) where it cannot be decided by seeds."""
    if study.decide is None and not requested:
        return None
    decide = study.decide or Decide()
    problems = decide_problems(study, decide)
    if not problems:
        decidable = [claim for claim in study.expect if not_decidable(study, claim) is None]
        if not decidable:
            problems = ["decide: none of the study's claims can be decided by seeds ("
                        + "; ".join(f"{claim.id}: {not_decidable(study, claim)}" for claim in study.expect) + ")"]
    if not problems and decide.budget_gpu_hours is not None:
        first = expand(study.model_copy(update={"seeds": decide.first_seeds(study.seeds)}))
        needed = sum(trial_gpu_hours(study, trial) for trial in distinct(first))
        if needed > decide.budget_gpu_hours:
            problems = [f"decide.budget_gpu_hours: {decide.budget_gpu_hours:g} GPU-hours cannot buy the minimum: "
                        f"every row at min_seeds {decide.min_seeds} needs {needed:.1f} (the plan's analytic estimate)"]
    if problems:
        raise UserInputError("the study cannot add seeds until its claims are decided: " + "; ".join(problems)
                             + ". Nothing was run.")
    return study if study.decide is not None else study.model_copy(update={"decide": decide})


def trial_gpu_hours(study: Study, trial: Trial) -> float:
    """The analytic GPU-hours of one trial (planning/estimate.py): a pure function of its config, so that a
    resumed sequence spends the budget as the uninterrupted one would (a measured estimate changes as the
    study's own trials finish)."""
    from dape_core import ExperimentConfig

    from .planning.estimate import estimate

    if not study.resources.gpus:
        return 0.0
    cost = estimate(ExperimentConfig(**trial.config), study.resources.gpus, study.resources.cpus)
    return cost.seconds * study.resources.gpus * cost.workers / 3600


def decide_and_report(context: RunContext, reports_dir: Path = Path("reports"),
                      say: Callable[[str], None] = print, new_sequence: bool = False) -> StudyOutcome:
    """Run the sequence of looks (module docstring), then write the study's report over every trial it planned.
    `context.study` has its `decide` section (`with_decide`). The outcome sums the looks' runs; its
    `report_summary` ends with the sequence's own summary (seeds and trials per claim). The design is checked
    against the one the store's sequence ran with (judging/design.py: another one is refused, exit 2, unless
    `new_sequence`)."""
    study, decide = context.study, context.study.decide
    assert decide is not None, "the caller gives the study its decide section (with_decide)"
    lines, note = decide_design.check(context.store, decide, new_sequence, list(study.seeds))
    for line in lines:
        say(line)
    order = decide.seed_order(study.seeds)
    every = expand(study.model_copy(update={"seeds": order}))  # every row at every seed it may train
    labels = list(dict.fromkeys(trial.label for trial in every))
    from .planning.seeds_needed import planned_trials

    sequence = Sequence(decide, note=note, planned=decide_design.planned(
        context.store, lambda: planned_trials(study, context.store.tracking_uri)), order=order)
    for claim in study.expect:
        reason = not_decidable(study, claim)
        sequence.claims[claim.id] = ClaimState(claim.id, NOT_DECIDABLE if reason else WAITING,
                                               claim_rows(study, claim), reason=reason or "")
    for state in sequence.claims.values():
        if state.status == NOT_DECIDABLE:
            say(f"Claim {state.id}: not decidable by seeds ({state.reason}); judged at the seeds its rows train")
    counts = {label: 0 for label in labels}
    total = StudyOutcome(trials=[], skipped=[])
    planned: list[Trial] = []
    hours = {trial.trial_id: trial_gpu_hours(study, trial) for trial in distinct(every)}
    plan = decide.looks()
    started_code = code_fingerprint(study.plugin_payloads())  # what the first look runs
    active = set(labels)  # the first look trains every row
    for index, seeds in enumerate(plan):
        grown = {label: seeds if label in active else counts[label] for label in labels}
        candidate = [trial for trial in every if trial.seed in order[:grown[trial.label]]]
        spent = _over_budget(decide, candidate, hours) if index else ""
        if spent:
            sequence.looks[-1].stopped = spent
            _close(sequence, BUDGET_SPENT, spent)
            _record(context, sequence)
            say(progress_line(sequence))
            break
        counts, planned = grown, candidate
        say(f"Look {index + 1} of at most {len(plan)}: {seeds} seeds for {_rows_words(active, labels)}")
        changed = changed_since(started_code, study.plugin_payloads()) if index else []
        if changed:  # a look's trials would run other code than the earlier looks': one claim, one code
            raise CodeChangedDuringSequence(
                f"the code changed on disk between look {index} and look {index + 1} of the sequence (files that "
                f"differ: {', '.join(changed)}): it stops rather than mixing code versions inside one claim. The "
                f"trials of the {index} look(s) done are in the store; run again to start the sequence at the "
                "current code (`run` then names the trials of the earlier code: --retrain-stale or --keep-stale).")
        look_context = replace(context, rows=planned, progress=None)
        outcome = run_trials(look_context)  # each trial scoring its report.lengths itself
        evaluate_later(look_context, outcome, reports_dir, say)  # the look's report.lengths, as `run` scores them
        _add(total, outcome)
        look = Look(index, seeds, [label for label in labels if label in active], len(distinct(planned)),
                    round(sum(hours[trial.trial_id] for trial in distinct(planned)), 4))
        _judge_look(context, sequence, index, planned, outcome, last=index == len(plan) - 1)
        look.claims = [replace(state) for state in sequence.claims.values()]
        sequence.looks.append(look)
        if not sequence.waiting():
            look.stopped = "every decidable claim is settled"
        elif index == len(plan) - 1:
            look.stopped = f"max_seeds ({decide.max_seeds}) reached"
            _close(sequence, MAX_REACHED, look.stopped)
        _record(context, sequence)
        say(progress_line(sequence))
        active = {row for state in sequence.waiting() for row in state.rows}
        if not active:
            break
    report = build_report(replace(context, rows=planned), reports_dir)
    total.trials = distinct(planned)
    total.report_dir, total.claims = report.folder, report.claims
    total.report_summary = report.summary + "\n" + sequence_summary(sequence)
    total.wall_seconds = time.monotonic() - context.started
    return total


def _rows_words(active: set[str], labels: list[str]) -> str:
    if len(active) == len(labels):
        return f"every row ({len(labels)})"
    return ", ".join(label for label in labels if label in active)


def _over_budget(decide: Decide, candidate: list[Trial], hours: dict[str, float]) -> str:
    """Why the next look cannot be bought ("" where it can)."""
    trials = distinct(candidate)
    if decide.budget_trials is not None and len(trials) > decide.budget_trials:
        return f"the next look needs {len(trials)} trials in all, over budget_trials {decide.budget_trials}"
    needed = sum(hours[trial.trial_id] for trial in trials)
    if decide.budget_gpu_hours is not None and needed > decide.budget_gpu_hours:
        return (f"the next look needs {needed:.1f} GPU-hours in all (analytic estimate), over budget_gpu_hours "
                f"{decide.budget_gpu_hours:g}")
    return ""


def _add(total: StudyOutcome, outcome: StudyOutcome) -> None:
    """The looks' runs summed into one outcome."""
    ran = {trial.trial_id for trial in outcome.trials} - {trial.trial_id for trial in outcome.skipped}
    total.skipped += [trial for trial in outcome.skipped if trial.trial_id not in {t.trial_id for t in total.trials}]
    total.trials += [trial for trial in outcome.trials if trial.trial_id in ran]
    total.failed.update(outcome.failed)
    total.trial_seconds += outcome.trial_seconds
    total.steps_run += outcome.steps_run
    total.trials_run += outcome.trials_run
    total.concurrency = max(total.concurrency, outcome.concurrency)


def _judge_look(context: RunContext, sequence: Sequence, index: int, planned: list[Trial],
                outcome: StudyOutcome, last: bool = False) -> None:
    """The waiting claims judged on exactly this look's trials; a claim whose trial failed stops here. At the
    `last` planned look an undecided claim stays waiting, to be closed as undecided at max_seeds."""
    from .reporting.results import study_results

    frame = study_results(context.store, context.study, trials=planned)
    frame = frame[frame["in_study"]] if "in_study" in frame else frame
    failed: dict[str, str] = {}  # a row's label -> its first failed trial and why
    for trial in planned:
        if trial.trial_id in outcome.failed:
            failed.setdefault(trial.label, f"{trial.run_name}: {outcome.failed[trial.trial_id]}")
    for judged in judge(context.study, frame, context.study_path):
        state = sequence.claims.get(judged.id)
        if state is None or state.status != WAITING:
            continue  # decided at an earlier look (it keeps that decision), stopped, or not decidable
        broken = [failed[row] for row in judged.rows if row in failed]
        state.rows = judged.rows
        state.verdict, state.seeds, state.reason = judged.verdict, judged.seeds, judged.reason
        state.effect, state.p, state.p_holm = judged.effect, judged.p, judged.p_holm
        if broken:
            state.status, state.look = TRIAL_FAILED, index
            state.reason = "a trial it reads failed: " + "; ".join(broken)[:300]
        elif not judged.decidable:
            state.status, state.look = NOT_DECIDABLE, index
        elif judged.decided:
            state.status, state.look = DECIDED, index
        elif not judged.needs_seeds and not last:  # e.g. a length of report.lengths not evaluated yet
            state.status, state.look = NOT_BY_SEEDS, index


def _close(sequence: Sequence, status: str, why: str) -> None:
    for state in sequence.waiting():
        state.status, state.reason = status, f"{why}; last judged: {state.reason}" if state.reason else why


def _record(context: RunContext, sequence: Sequence) -> None:
    """The look on the study's parent run: its metrics at step = its index (once: a resumed sequence that
    recomputes a recorded look does not log it again), and every look so far as `looks.json`."""
    store, look = context.store, sequence.looks[-1]
    if not store.parent_run_id:
        return
    decide_design.record(store, sequence.decide, sequence.note, sequence.planned,  # the design, locked
                         sequence.order or None)
    if not any(point.step == look.index for point in store.metric_history(store.parent_run_id, LOOK_SEEDS)):
        counts = [state.status for state in look.claims]
        metrics = {LOOK_SEEDS: look.seeds, LOOK_TRIALS: look.trials, LOOK_GPU_HOURS: look.gpu_hours,
                   LOOK_DECIDED: counts.count(DECIDED), LOOK_WAITING: counts.count(WAITING)}
        store.log_metrics(store.parent_run_id, metrics, look.index, int(time.time() * 1000))
    store.log_parent_text(json.dumps(sequence.record(), indent=2, default=str) + "\n", LOOKS_FILE)


def progress_line(sequence: Sequence) -> str:
    """What the console says after a look: the settled claims and those waiting on more seeds."""
    look, states = sequence.looks[-1], list(sequence.claims.values())
    settled = [f"{s.id} ({s.verdict}, {s.seeds} seeds)" for s in states if s.status == DECIDED]
    waiting = [s.id for s in states if s.status == WAITING]
    stopped = [f"{s.id} ({s.reason})" for s in states if s.status == TRIAL_FAILED]
    elsewhere = [f"{s.id} ({s.reason})" for s in states if s.status == NOT_BY_SEEDS]
    parts = [f"After look {look.index + 1} ({look.seeds} seeds, {look.trials} trials in all): "
             f"settled: {', '.join(settled) or 'none'}"]
    if waiting:
        parts.append(f"waiting on more seeds: {', '.join(waiting)}")
    if stopped:
        parts.append(f"stopped by a failed trial: {', '.join(stopped)}")
    if elsewhere:
        parts.append(f"not settled by more seeds: {', '.join(elsewhere)}")
    if look.stopped:
        parts.append(f"done: {look.stopped}")
    return "; ".join(parts)


def sequence_summary(sequence: Sequence) -> str:
    """The command line's closing lines: per claim, what became of it at how many seeds."""
    last = sequence.looks[-1] if sequence.looks else None
    lines = [f"Seeds added until decided: {len(sequence.looks)} look(s), {last.trials if last else 0} trials"
             + (f" ({last.gpu_hours:g} GPU-hours estimated)" if last and last.gpu_hours else "")
             + (f"; stopped: {last.stopped}" if last and last.stopped else "")
             + (f"; {sequence.plan_versus_used()}" if sequence.planned[1] else "")]
    for state in sequence.claims.values():
        at = f" at {state.seeds} seeds" if state.seeds else ""
        verdict = f": {state.verdict}" if state.verdict and state.status != NOT_DECIDABLE else ""
        lines.append(f"  {state.id}: {state.status}{at}{verdict}")
    return "\n".join(lines)

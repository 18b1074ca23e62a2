"""What deciding a study's claims by adding seeds (`run --decide`) is expected to cost, for `orchestrator plan`:
per claim, the seeds it is expected to need, and the trials and device-hours that implies.

Learned from the store, as plan's step times are (learned.py). A claim's checks compare rows' metrics
(study/claim_checks.py); for each side the store may hold finished runs of the very same config at other
seeds (any experiment): their mean is the side's expected value and, with two seeds or more, their spread is
the seed-to-seed spread. Where a row has fewer than two seeds, the spread is borrowed, relative to the mean,
from runs of the same shape (learned.py's shape key: model, processor, length, batch, device) that do have
several seeds. The expected seeds are then the first planned look (`Decide.looks()`) at which a one-sided paired
test at the study's error rate split across its claims (alpha / claims, as Holm's first step) has about 80%
power for the measured effect: |effect| x sqrt(n) / sd >= t(1 - alpha/claims, n - 1) + z(0.8). This is an
expectation for planning, not the decision rule (judging/claims.py decides). Where no run of the claim's
rows (or of the same shape) is in the store, it says so and a stated default applies: an effect of
DEFAULT_EFFECT_SD seed standard deviations (the simulation decides it at 5.6 seeds on average: docs/deciding.md).

Every figure is a range, never a floor called "about": the first look (every row at min_seeds), the
expected, and the ceiling (every row a decidable claim reads at max_seeds), in trials and device-hours.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..study import Decide, Study
from ..study.claim_checks import Check, claim_checks, study_rows
from ..tracking.params import effective_params, logged_form
from .learned import shape_key
from .plan_view import trial_seconds

if TYPE_CHECKING:
    from ..tracking.readers import ClientReader, SQLiteReader

DEFAULT_EFFECT_SD = 2.0  # the effect assumed where the store knows no spread: 2 seed SDs
POWER_Z = 0.8416  # z(0.8): the expected seeds give the test about 80% power on the measured effect
IGNORED = ("train.seed", "train.device", "train.precision")  # not a config's identity across seeds (params.py)


@dataclass
class SeedRuns:
    """Finished trial runs of the store, grouped by config without its seed: {config: {seed: metrics}}, and
    each config's shape key."""

    by_config: dict[tuple, dict[str, dict[str, float]]] = field(default_factory=dict)
    shape_of: dict[tuple, tuple] = field(default_factory=dict)

    def add(self, params: dict, metrics: dict, device: str) -> None:
        key = config_key(params)
        self.by_config.setdefault(key, {})[str(params.get("train.seed"))] = dict(metrics)
        self.shape_of[key] = shape_key(params, device)


def config_key(params: dict) -> tuple:
    """A config's identity across seeds, from a run's logged params or a planned trial's effective params
    (settings it does not read, or without a value, left out on both sides: tracking/params.py)."""
    return tuple(sorted((key, str(value)) for key, value in logged_form(params).items() if key not in IGNORED))


def load_seed_runs(store: str | SQLiteReader | ClientReader) -> SeedRuns:
    """Every finished trial run of every experiment in the store (its URI, or the reader of a store the command
    has open), read without MLflow where it is SQLite."""
    from ..tracking.readers import reader_for
    from ..tracking.store import ROLE_TAG

    reader, runs = reader_for(store) if isinstance(store, str) else store, SeedRuns()
    for experiment_id in reader.experiment_ids():
        for run in reader.runs(experiment_id, ROLE_TAG, "trial"):
            if run.info.status == "FINISHED":
                runs.add(run.data.params, run.data.metrics, run.data.tags.get("device", "cpu"))
    return runs


@dataclass
class ClaimCost:
    id: str
    rows: list[str]
    seeds: int  # expected seeds per row (min_seeds where unknown)
    known: bool
    basis: str  # how `seeds` was found, or why it is unknown
    trials: int = 0
    hours: float = 0.0  # device-hours (GPU-hours on GPUs, CPU-core-hours on CPUs)
    first: int = 0  # the seeds of its first look, and of its ceiling (max_seeds)
    ceiling: int = 0
    per_seed_hours: float = 0.0  # device-hours of one seed of all its rows


def _term_values(term, group: dict[str, dict[str, float]]) -> dict[str, float]:
    values = {}
    for seed, metrics in group.items():
        value = metrics.get(term.column)
        if value is not None and term.over is not None:
            below = metrics.get(term.over)
            value = value / below if below else None
        if value is not None and math.isfinite(value):
            values[seed] = value
    return values


def _borrowed_cv(runs: SeedRuns, shape: tuple, term) -> float | None:
    """The median relative seed-to-seed spread of `term`'s metric among configs of this shape with 2+ seeds."""
    spreads = []
    for key, group in runs.by_config.items():
        if runs.shape_of.get(key) != shape:
            continue
        values = list(_term_values(term, group).values())
        if len(values) >= 2 and statistics.fmean(values):
            spreads.append(statistics.stdev(values) / abs(statistics.fmean(values)))
    return statistics.median(spreads) if spreads else None


class _Side:
    """One side of a check as the store knows it: per-seed values, mean, spread (own or borrowed)."""

    def __init__(self, runs: SeedRuns, config: dict, device: str, term):
        key = config_key(effective_params(config))
        self.values = _term_values(term, runs.by_config.get(key, {}))
        self.mean = statistics.fmean(self.values.values()) if self.values else None
        self.sd = statistics.stdev(self.values.values()) if len(self.values) >= 2 else None
        self.borrowed = False
        if self.sd is None and self.mean is not None:
            cv = _borrowed_cv(runs, shape_key(effective_params(config), device), term)
            if cv is not None:
                self.sd, self.borrowed = cv * abs(self.mean), True


def _check_spread(check: Check, left: _Side, right: _Side | None) -> tuple[float, float, str] | None:
    """(effect, sd of the per-seed difference, basis), or None where the store cannot say."""
    if left.mean is None:
        return None
    if right is None:
        effect = left.mean - check.shift
        if left.sd is None:
            return None
        return effect, left.sd, "borrowed" if left.borrowed else "own"
    if right.mean is None:
        return None
    effect = left.mean - (check.scale * right.mean + check.shift)
    common = sorted(set(left.values) & set(right.values))
    if len(common) >= 2:  # the paired spread itself
        diffs = [left.values[s] - check.scale * right.values[s] for s in common]
        return effect, statistics.stdev(diffs), "own"
    if left.sd is None or right.sd is None:
        return None
    return effect, math.hypot(left.sd, check.scale * right.sd), "borrowed" if left.borrowed or right.borrowed else "own"


def seeds_for(effect: float, sd: float, decide: Decide, claims: int, min_seeds: int = 1) -> int | None:
    """The first planned look (at `min_seeds` or more: the claim's own) with about 80% power for `effect` at
    alpha / claims; None: beyond max_seeds."""
    from scipy.stats import t

    for n in [n for n in decide.looks() if n >= min_seeds]:
        if sd <= 0:
            return n
        if abs(effect) * math.sqrt(n) / sd >= t.ppf(1 - decide.alpha / max(claims, 1), n - 1) + POWER_Z:
            return n
    return None


def claim_costs(study: Study, runs: SeedRuns, measured=None, decide: Decide | None = None) -> list[ClaimCost]:
    """Each claim of the study: expected seeds, and the trials and device-hours of its rows at that count."""
    decide = decide or study.decide or Decide()
    device = "cuda" if study.resources.gpus else "cpu"
    configs = {row.label: row.config.to_dict() for _, row in study_rows(study)}
    per_device = study.resources.gpus or study.resources.cpus
    costs = []
    for claim in study.expect:
        try:
            checks = claim_checks(study, claim)
        except ValueError:
            continue  # refused by validation already
        rows = sorted({term.label for check in checks for term in (check.left, check.right) if term is not None})
        found = [_check_spread(check, _Side(runs, configs[check.left.label], device, check.left),
                               _Side(runs, configs[check.right.label], device, check.right) if check.right else None)
                 for check in checks]
        spreads = [item for item in found if item is not None]
        first = next((n for n in decide.looks() if n >= claim.min_seeds), decide.max_seeds)
        if not checks or len(spreads) < len(found):  # no spread in the store: the stated default effect
            seeds = seeds_for(DEFAULT_EFFECT_SD, 1.0, decide, len(study.expect), claim.min_seeds) or decide.max_seeds
            known = False
            basis = (f"no seed-to-seed spread of these rows or similar ones in the store: a default effect of "
                     f"{DEFAULT_EFFECT_SD:g} seed SDs is assumed")
        else:
            needed = [seeds_for(effect, sd, decide, len(study.expect), claim.min_seeds) for effect, sd, _ in spreads]
            borrowed = any(kind == "borrowed" for _, _, kind in spreads)
            spread = "spread of runs of the same shape" if borrowed else "these rows' own seeds"
            powered = [n for n in needed if n is not None]  # None: beyond max_seeds
            if len(powered) < len(needed):
                seeds, known = decide.max_seeds, True
                basis = f"more than max_seeds: the effect is small for its spread ({spread})"
            else:
                seeds, known = max(powered), True
                weakest = min(abs(e) / sd if sd else math.inf for e, sd, _ in spreads)
                basis = f"effect / spread {weakest:.2g} ({spread})"
        cost = ClaimCost(claim.id, rows, seeds, known, basis, trials=len(rows) * seeds, first=first,
                         ceiling=decide.max_seeds)
        for label in rows:
            seconds = trial_seconds(configs[label], study, measured)
            cost.per_seed_hours += seconds * per_device * configs[label]["distributed"]["workers"] / 3600
        cost.hours = cost.per_seed_hours * seeds
        costs.append(cost)
    return costs


def study_cost(study: Study, costs: list[ClaimCost], measured=None, which: str = "seeds") -> tuple[int, float]:
    """(trials, device-hours) of the whole sequence as expected (`which` "seeds"; "first": the first look;
    "ceiling": at most): each row at the most seeds a claim reading it needs, every other row at min_seeds."""
    decide = study.decide or Decide()
    seeds = {row.label: decide.min_seeds for _, row in study_rows(study)}
    for cost in costs:
        for label in cost.rows:
            seeds[label] = max(seeds[label], getattr(cost, which))
    configs = {row.label: row.config.to_dict() for _, row in study_rows(study)}
    per_device = study.resources.gpus or study.resources.cpus
    hours = sum(trial_seconds(configs[label], study, measured) * n * per_device
                * configs[label]["distributed"]["workers"] / 3600 for label, n in seeds.items())
    return sum(seeds.values()), hours


def plan_lines(study: Study, runs: SeedRuns, measured=None, per_claim: bool = True) -> list[str]:
    """`orchestrator plan`'s section on deciding the claims by seeds; `per_claim` (plan --explain): each claim's
    expected seeds too, else the whole study's first look, expected and ceiling only."""
    if not study.expect or study.search.sampled:
        return []
    decide = study.decide or Decide()
    costs = claim_costs(study, runs, measured, decide)
    unit = "GPU-hours" if study.resources.gpus else "CPU-core-hours"
    how = "this study's decide: section" if study.decide else "run --decide, its defaults"
    lines = [f"Deciding the claims by seeds ({how}: min_seeds {decide.min_seeds}, max_seeds {decide.max_seeds}, "
             f"batch {decide.batch}, alpha {decide.alpha:g})" + ("; expected per claim:" if per_claim else ":")]
    for cost in costs if per_claim else ():
        rows = len(cost.rows)
        seeds = f"{cost.seeds} seeds" if cost.known else f"{cost.seeds} seeds by default"
        lines.append(f"  {cost.id}: expected {seeds}; {cost.trials} trials of {rows} rows, {cost.hours:.2g} {unit} "
                     f"({cost.basis}); first look {cost.first * rows} trials, ceiling {cost.ceiling * rows} trials "
                     f"({cost.per_seed_hours * cost.ceiling:.2g} {unit})")
    lines.append("  whole study with --decide: " + range_words(study, costs, measured))
    return lines


def planned_trials(study: Study, tracking_uri: str) -> tuple[int, int]:
    """(expected, ceiling) trials of the whole sequence as `plan` gives them from this store now: what a
    `run --decide` records before its first look, to be checked against the trials it used."""
    from ..tracking.uri import store_missing
    from .learned import load_measured

    runs, measured = SeedRuns(), None
    if store_missing(tracking_uri) is None:
        runs, measured = load_seed_runs(tracking_uri), load_measured(tracking_uri)
    costs = claim_costs(study, runs, measured)
    return study_cost(study, costs, measured)[0], study_cost(study, costs, measured, "ceiling")[0]


def range_words(study: Study, costs: list[ClaimCost], measured=None) -> str:
    """The whole sequence's first look, expected and ceiling: "first look 20 trials (0.2 GPU-hours), expected
    38 trials (0.41), ceiling 100 trials (1.1): book the ceiling"."""
    unit = "GPU-hours" if study.resources.gpus else "CPU-core-hours"
    (first, first_h), (expected, expected_h), (ceiling, ceiling_h) = (
        study_cost(study, costs, measured, which) for which in ("first", "seeds", "ceiling"))
    return (f"first look {first} trials ({first_h:.2g} {unit}), expected {expected} trials ({expected_h:.2g}), "
            f"ceiling {ceiling} trials ({ceiling_h:.2g}: every row a claim reads at max_seeds; book this)")


def decide_note(study: Study, store: str | SQLiteReader | ClientReader, finished: int) -> str:
    """What deciding the claims by seeds would add to a study run without it (its report says so): the trials
    beyond the `finished` ones it has, and their time (training and evaluation), as `orchestrator plan` expects them."""
    if not study.expect or study.decide is not None or study.search.sampled:
        return ""
    from .learned import load_measured

    runs, measured = load_seed_runs(store), load_measured(store)
    costs = claim_costs(study, runs, measured)
    trials, hours = study_cost(study, costs, measured)
    per_device = study.resources.gpus or study.resources.cpus
    unknown = sum(not cost.known for cost in costs)
    spread = (f"; for {unknown} of {len(costs)} claims the seed-to-seed spread is not measured yet, so a default "
              f"effect of {DEFAULT_EFFECT_SD:g} seed SDs is counted" if unknown else "")
    ceiling = study_cost(study, costs, measured, "ceiling")[0]
    device = f"{study.resources.gpus:g} GPU" if study.resources.gpus else f"{study.resources.cpus:g} CPU"
    return (f"Deciding these claims by seeds (`orchestrator run --decide`, defaults) would train about "
            f"{max(trials - finished, 0)} more trial(s) (at most {max(ceiling - finished, 0)}): {trials} in all, "
            f"about {_minutes(hours * 3600 / per_device)} "
            f"of training and evaluation for all of them, one trial at a time on {device}{spread}; "
            "`orchestrator plan` gives the seeds and cost per claim.")


def _minutes(seconds: float) -> str:
    return f"{seconds / 3600:.1f} hours" if seconds >= 7200 else f"{max(seconds / 60, 1):.0f} minutes"

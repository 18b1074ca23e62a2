"""A claim of a study's `expect:` section as concrete checks on the study's rows: which rows `variant`,
`than` and `where` address, which results column each metric and length is, and the "left < right" (or ">")
comparisons that must hold for the claim to hold. The same resolution validates a study before anything
runs (`claim_problems`: unknown variants, `where` keys or values, metrics and lengths, with the claim's field
path) and feeds the report's verdicts (orchestrator/judging/claims.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import dape_core.metric_names as names

from .expect import Best, Bound, Compare, Length, LengthRatio, Order, Trend, length_tokens
from .problems import did_you_mean
from .trial_checks import resolved_rows
from .trial_metrics import periodic_metrics, result_shape

if TYPE_CHECKING:
    from .model import Study
    from .rows import Cell

# --- resolving claims against the study's rows -------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    """A report row a claim reads: its label (the trials' `label`), grid point and resolved config."""

    label: str
    point: tuple  # the swept values, sorted: rows of one grid point are compared with each other
    config: Any  # dape_core.ExperimentConfig
    later: tuple[int, ...] = ()  # the study's report.lengths this row's trials are evaluated at after training


# What `orchestrator evaluate` logs at a length evaluated after training ...
LATER_FAMILIES = (names.family(names.PPL), names.family(names.DELTA_P))
CHE_LATER_FAMILIES = (names.family(names.ACC),)  # ... for a CHE model: its accuracy at a new test length


def later_families(row: Row) -> tuple[str, ...]:
    return CHE_LATER_FAMILIES if row.config.che is not None else LATER_FAMILIES


def later_columns(row: Row) -> set[str]:
    """The results columns of this row that only `orchestrator evaluate` writes (report.lengths)."""
    return {names.per_length(names.family_prefix(family), length)
            for family in later_families(row) for length in row.later}


def study_rows(study: "Study") -> list[tuple["Cell", Row]]:
    rows = []
    for resolved in resolved_rows(study):  # the rows as the study's validation resolved them
        cell, config = resolved.cell, resolved.config
        assert cell is not None, "a study row has its cell (only a search value's config has none)"
        if config.che is not None:
            later = tuple(study.report.later_lengths(config.che.train_max_length, list(config.che.test_lengths)))
        else:
            later = tuple(study.report.later_lengths(config.train.seq_len, list(config.eval.lengths)))
        rows.append((cell, Row(cell.label, tuple(sorted((k, repr(v)) for k, v in cell.swept.items())), config,
                               later)))
    return rows


def config_value(config: Any, dotted: str) -> Any:
    node = config
    for part in dotted.split("."):
        if node is None or not hasattr(node, part):
            raise KeyError(dotted)
        node = getattr(node, part)
    return node


def baseline_variant(study: "Study") -> str | None:
    """What 'baseline' names: `report.baseline` (a variant or a row) where set, as in the report's tables;
    else the variant marked baseline: true."""
    if study.report.baseline is not None:
        return study.report.baseline
    marked = [variant.label for variant in study.variants if variant.baseline]
    return marked[0] if marked else None


def select(study: "Study", rows: list[tuple["Cell", Row]], name: str, where: dict[str, Any]) -> list[Row]:
    """The rows `name` (a row label, a variant label, or 'baseline') and `where` address; ValueError if none."""
    if name == "baseline":
        name = baseline_variant(study) or ""
        if not name:
            raise ValueError("'baseline': the study marks no variant baseline: true")
    chosen = [row for cell, row in rows if cell.label == name] or [row for cell, row in rows if cell.variant == name]
    if not chosen:
        variants = sorted({cell.variant for cell, _ in rows})
        hint = did_you_mean(name, variants + [cell.label for cell, _ in rows])
        raise ValueError(f"{name!r} is not a variant or row of this study{hint}; variants: {variants}")
    for key, value in where.items():
        kept = []
        for row in chosen:
            try:
                found = config_value(row.config, key)
            except KeyError:
                raise ValueError(f"where: {key!r} is not a config key (e.g. model.pos_encoding)") from None
            if found == value or (isinstance(value, list) and not isinstance(found, list) and found in value):
                kept.append(row)
        if not kept:
            values = sorted({str(config_value(row.config, key)) for row in chosen})
            raise ValueError(f"where: no row of {name!r} has {key} = {value!r} (values: {values})")
        chosen = kept
    return chosen


def length_of(row: Row, length: Length) -> int:
    train = row.config.che.train_max_length if row.config.che is not None else row.config.train.seq_len
    return length_tokens(length, train)


def row_metrics(row: Row) -> tuple[set[str], dict[str, list[int]]]:
    """(single metrics, length family -> lengths) that a finished trial of this row logs."""
    shape = result_shape(row.config)
    single = set(names.result_scalars(che=row.config.che is not None)) | periodic_metrics(row.config)
    families = names.result_families(**shape)
    return single, {names.family(prefix): lengths for prefix, lengths in families.items()}


def metric_column(row: Row, metric: str, length: Length | None) -> str:
    """The results column of `metric` at `length` for this row; ValueError naming what exists."""
    single, families = row_metrics(row)
    if length is None:
        if metric in single:
            return metric
        if metric in families:
            raise ValueError(f"metric {metric!r} is logged per length: give 'at' (lengths {families[metric]})")
        raise ValueError(f"unknown metric {metric!r}{did_you_mean(metric, sorted(single | set(families)))}; "
                         f"this study logs {sorted(single | set(families))}")
    if metric in single:
        raise ValueError(f"metric {metric!r} has no lengths: drop 'at' (per-length metrics: {sorted(families)})")
    if metric not in families:
        raise ValueError(f"unknown metric {metric!r}{did_you_mean(metric, sorted(single | set(families)))}; "
                         f"this study logs {sorted(single | set(families))} "
                         f"({', '.join(sorted(families))} per length)")
    tokens = length_of(row, length)
    later_family = metric in later_families(row)
    if tokens in families[metric] or (later_family and tokens in row.later):
        return names.per_length(names.family_prefix(metric), tokens)
    later = f", evaluated later (report.lengths): {list(row.later)}" if row.later and later_family else ""
    hint = " or add it to report.lengths and run orchestrator evaluate" if later_family else ""
    section = "che.test_lengths" if row.config.che is not None else "eval.lengths"
    raise ValueError(f"length {length!r} (= {tokens}) is not evaluated for {row.label!r}; "
                     f"its lengths: {families[metric]}{later}; add it to {section}{hint}")


# --- a claim as concrete checks ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Term:
    """One row's metric column, or the ratio of two of its columns (length_ratio)."""

    label: str
    column: str
    over: str | None = None

    def describe(self) -> str:
        return f"{self.label}: {self.column}" + (f"/{self.over}" if self.over else "")


@dataclass(frozen=True)
class Check:
    """left `relation` scale x right + shift (right None: the constant `shift`), per seed. A claim holds
    where every one of its checks does."""

    left: Term
    relation: str  # "<" or ">"
    right: Term | None
    scale: float = 1.0
    shift: float = 0.0


def _pairs(left: list[Row], right: list[Row]) -> list[tuple[Row, Row]]:
    """Rows of one grid point together; a single right-hand row serves every left-hand row."""
    if len(right) == 1:
        return [(row, right[0]) for row in left if row.label != right[0].label]
    by_point = {row.point: row for row in right}
    missing = [row.label for row in left if row.point not in by_point]
    if missing:
        raise ValueError(f"no row to compare with at the grid point of {missing}")
    return [(row, by_point[row.point]) for row in left if row.label != by_point[row.point].label]


def _lengths(claim: Any) -> list[Length | None]:
    return list(claim.at) if claim.at else [None]


def _term(claim: Any, row: Row, length: Length | None) -> Term:
    over = getattr(claim, "over", None)
    return Term(row.label, metric_column(row, claim.metric, length),
                metric_column(row, claim.metric, over) if over is not None else None)


def _pair_checks(claim: Any, pairs: list[tuple[Row, Row]], relation: str, scale: float = 1.0,
                 shift: float = 0.0) -> list[Check]:
    return [Check(_term(claim, a, length), relation, _term(claim, b, length), scale, shift)
            for length in _lengths(claim) for a, b in pairs]


def _compare(study, rows, claim: Compare) -> list[Check]:
    pairs = _pairs(select(study, rows, claim.variant, claim.where), select(study, rows, claim.than, claim.where))
    if not pairs:
        raise ValueError(f"{claim.variant!r} is the same row as {claim.than!r}: nothing to compare")
    if claim.within is not None:  # a band: on the claimed side of B (or either), and less than `within` from it
        checks = []
        if claim.direction != "above":
            checks += _pair_checks(claim, pairs, ">", 1 - claim.within)
        if claim.direction != "below":
            checks += _pair_checks(claim, pairs, "<", 1 + claim.within)
        if claim.direction is not None:
            checks += _pair_checks(claim, pairs, "<" if claim.direction == "below" else ">")
        return checks
    below = claim.direction == "below"
    shift = 0.0 if claim.margin is None else (-claim.margin if below else claim.margin)
    scale = claim.ratio or 1.0
    if claim.min_effect is not None:  # the smallest effect that matters: A beyond (1 -/+ min_effect) x B
        scale = 1 - claim.min_effect if below else 1 + claim.min_effect
    return _pair_checks(claim, pairs, "<" if below else ">", scale, shift)


def _length_ratio(study, rows, claim: LengthRatio) -> list[Check]:
    checks = []
    for row in select(study, rows, claim.variant, claim.where):
        term = Term(row.label, metric_column(row, claim.metric, claim.at), metric_column(row, claim.metric, claim.over))
        bound = claim.at_least if claim.at_least is not None else claim.at_most
        assert bound is not None, "a length_ratio claim has at_least or at_most (its validation)"
        checks.append(Check(term, ">" if claim.at_least is not None else "<", None, shift=bound))
    return checks


def _trend(study, rows, claim: Trend) -> list[Check]:
    if claim.variants is not None:
        names = claim.variants
    else:
        assert claim.variant is not None, "a trend names variant or variants (its validation)"
        names = [claim.variant]
    chosen = [row for name in names for row in select(study, rows, name, claim.where)]
    groups: dict[tuple, list[tuple[Any, Row]]] = {}  # the rest of the grid point -> (axis value, row)
    for row in chosen:
        try:
            value = config_value(row.config, claim.axis)
        except KeyError:
            raise ValueError(f"axis: {claim.axis!r} is not a config key (e.g. model.d_dape)") from None
        groups.setdefault(tuple(p for p in row.point if p[0] != claim.axis), []).append((value, row))
    pairs = []
    for members in groups.values():
        members.sort(key=lambda item: item[0])
        values = [value for value, _ in members]
        if len(set(map(repr, values))) != len(values) or len(values) < 2:
            raise ValueError(f"axis: the rows {[r.label for _, r in members]} need distinct values of "
                             f"{claim.axis} (found {values})")
        pairs += [(members[i + 1][1], members[i][1]) for i in range(len(members) - 1)]
    up = claim.direction == "increasing"
    return _pair_checks(claim, pairs, ">" if up else "<", (1 - claim.tolerance) if up else (1 + claim.tolerance))


def _order(study, rows, claim: Order) -> list[Check]:
    ranked = [select(study, rows, name, claim.where) for name in claim.variants]
    pairs = [pair for first, second in zip(ranked, ranked[1:]) for pair in _pairs(second, first)]
    return _pair_checks(claim, pairs, ">" if claim.direction == "increasing" else "<")


def _best(study, rows, claim: Best) -> list[Check]:
    others = claim.among or sorted({cell.variant for cell, _ in rows})
    mine = select(study, rows, claim.variant, claim.where)
    pairs = [pair for name in others if name != claim.variant
             for pair in _pairs(mine, select(study, rows, name, claim.where))]
    return _pair_checks(claim, pairs, "<" if claim.direction == "lowest" else ">")


def _bound(study, rows, claim: Bound) -> list[Check]:
    names = claim.variants or sorted({cell.variant for cell, _ in rows})
    chosen = [row for name in names for row in select(study, rows, name, claim.where)]
    bound = claim.at_least if claim.at_least is not None else claim.at_most
    assert bound is not None, "a bound claim has at_least or at_most (its validation)"
    return [Check(Term(row.label, metric_column(row, claim.metric, length)),
                  ">" if claim.at_least is not None else "<", None, shift=bound)
            for length in _lengths(claim) for row in chosen]


_CHECKS: dict[str, Callable[..., list[Check]]] = {"bound": _bound, "compare": _compare, "length_ratio": _length_ratio,
                                                  "trend": _trend, "order": _order, "best": _best}


def claim_checks(study: "Study", claim: Any, rows: list | None = None) -> list[Check]:
    """The checks a claim stands for; ValueError where it names what the study does not have."""
    return _CHECKS[claim.kind](study, rows if rows is not None else study_rows(study), claim)


def claim_problems(study: "Study") -> list[str]:
    """Every claim resolved against the study's rows, metrics and lengths: one message per bad claim."""
    if not study.expect:
        return []
    try:
        rows = study_rows(study)
    except Exception:  # the rows' own problems are reported by the trial validation
        return []
    problems = []
    ids = [claim.id for claim in study.expect]
    for index, claim in enumerate(study.expect):
        if ids.count(claim.id) > 1 and ids.index(claim.id) == index:
            problems.append(f"expect[{index}].id: {claim.id!r} names more than one claim; ids must be unique")
        try:
            if not claim_checks(study, claim, rows):
                problems.append(f"expect[{index}] ({claim.id}): it compares nothing (no two distinct rows)")
        except ValueError as error:
            problems.append(f"expect[{index}] ({claim.id}): {error}")
    return problems


def known_metrics() -> list[str]:
    """Every metric a claim may name in some study (a row of any shape): what a claim's metric is checked
    against where the study's rows cannot be resolved."""
    shapes = (names.result_families(timed=True), names.result_families(che_test_lengths=()))
    return sorted({*names.result_scalars(che=True), *names.PERIODIC,
                   *(names.family(prefix) for shape in shapes for prefix in shape)})


def claim_reference_problems(claims: list, variants: list[str]) -> list[str]:
    """The claims' row names and metrics checked against the declared variant labels and every known metric:
    what can be resolved where the rows cannot (a variant's config, base or a claim itself is invalid), so that
    a claim's typo is reported with theirs. `claims`: the claims as the file writes them (mappings)."""
    problems = []
    metrics = known_metrics()
    for index, claim in enumerate(claims):
        if not isinstance(claim, dict):
            continue
        where = f"expect[{index}]" + (f" ({claim['id']})" if isinstance(claim.get("id"), str) else "")
        for field in ("variant", "than", "variants", "among"):
            value = claim.get(field)
            for name in (value if isinstance(value, list) else [value]):
                if not isinstance(name, str) or name == "baseline" or name in variants \
                        or any(name.startswith(f"{label} (") for label in variants):
                    continue
                problems.append(f"{where}: {field}: {name!r} is not a variant or row of this study"
                                f"{did_you_mean(name, variants)}; variants: {sorted(variants)}")
        metric = claim.get("metric", "ppl")
        if isinstance(metric, str) and metric not in metrics:
            problems.append(f"{where}: metric: unknown metric {metric!r}{did_you_mean(metric, metrics)}; "
                            f"claims name one of {metrics}")
    return problems

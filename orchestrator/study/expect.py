"""The `expect:` section of a study file: the paper's claims about the results, as data, so that the report
can say which ones this run reproduces (orchestrator/reporting/claims.py evaluates them).

Each claim has a `kind`, an `id` (its MLflow tag is `claim.<id>`), the `source` it comes from (the paper's
table or figure) and the rows and metric it is about:

- `compare`: `variant`'s metric `below`/`above` `than`'s (a variant, or `baseline`), optionally by a
  `margin` (A <= B - margin) or a `ratio` (A <= ratio x B; above: A >= ratio x B), at lengths `at`; with
  `over`, each side is its metric at `at` over its metric at `over` (the gap grows with the length:
  DAPE's ppl(8x)/ppl(1x) below Kerple's);
- `length_ratio`: one variant's metric at length `at` over its metric at length `over`, `at_least` or
  `at_most` a bound (RoPE's ppl at 8x over its ppl at 1x >= 2);
- `trend`: the metric `increasing`/`decreasing` along `axis` (a dotted config key: a swept axis or a key the
  listed `variants` set), each step allowed a relative `tolerance` the wrong way;
- `order`: the listed `variants` in `increasing`/`decreasing` order of the metric;
- `best`: `variant` the `lowest`/`highest` of `among` (default: every variant);
- `bound`: the metric of `variants` (default: every variant) `at_least`/`at_most` a value (parity near
  chance: che_acc_test at_most 0.6).

Rows are addressed by `variant` (a variant's label: its rows at every grid point; or a full row label such
as "DAPE (pos_encoding=rope)": that row alone) and `where` (dotted key -> value: keep the rows whose
resolved config has that value; a list of values: any of them). Comparisons pair rows of the same grid point. Lengths in `at`/`over` are
token counts, or multiples of the row's training length ("8x"). `metric` is a family with lengths (`ppl`,
`delta_p`, `ms_forward`, `acc`) or a single metric (`che_acc_test`, `ms_per_step`, `train_loss`, ...).

`claim_problems` checks every claim against the study's rows before anything runs: unknown variants,
`where` keys or values, metrics and lengths are reported with the claim's field path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

if TYPE_CHECKING:
    from .model import Study
    from .rows import Cell

LENGTH_FAMILIES = ("ppl", "delta_p", "ms_forward", "acc")  # metrics logged per length: <family>_<L>
Length = Union[int, str]  # tokens, or "<N>x": N times the row's training length
_MULTIPLE = re.compile(r"^(\d+(?:\.\d+)?)x$")


class _Claim(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="Names the claim: MLflow tag claim.<id>.")
    source: str = Field(min_length=1, description="Where the paper states it, e.g. 'DAPE V2 Table 1'.")
    text: str = Field("", description="The claim in words, as the report shows it.")
    metric: str = Field("ppl", description="ppl, delta_p, ms_forward, acc (with lengths) or a single metric "
                        "such as che_acc_test, ms_per_step, train_loss.")
    where: dict[str, Any] = Field(default_factory=dict, description="Dotted key -> value: only the rows whose "
                                  "config has that value (e.g. {model.pos_encoding: rope}).")
    min_seeds: int = Field(1, ge=1, description="Fewer finished seeds than this: inconclusive. With 3 or more, "
                           "a paired test by seed (Holm-corrected across the study's claims) must agree.")


def _as_list(value: Any) -> Any:
    return value if isinstance(value, list) or value is None else [value]


class _AtLengths(_Claim):
    at: list[Length] | None = Field(None, description="Lengths (tokens, or '8x' of the training length); "
                                    "needed by the length families, refused by single metrics.")

    @field_validator("at", mode="before")
    @classmethod
    def _list_at(cls, value: Any) -> Any:
        return _as_list(value)


class Compare(_AtLengths):
    kind: Literal["compare"]
    variant: str = Field(description="The rows the claim is about.")
    than: str = Field("baseline", description="The rows compared with: a variant, or 'baseline'.")
    direction: Literal["below", "above"]
    margin: float | None = Field(None, ge=0, description="below: A <= B - margin; above: A >= B + margin.")
    ratio: float | None = Field(None, gt=0, description="below: A <= ratio x B; above: A >= ratio x B.")
    over: Length | None = Field(None, description="Compare metric(at)/metric(over) of each side instead.")

    @model_validator(mode="after")
    def _one_bound(self) -> "Compare":
        if self.margin is not None and self.ratio is not None:
            raise ValueError("give 'margin' or 'ratio', not both")
        return self


class LengthRatio(_Claim):
    kind: Literal["length_ratio"]
    variant: str
    at: Length = Field(description="The numerator's length, e.g. '8x'.")
    over: Length = Field(description="The denominator's length, e.g. '1x'.")
    at_least: float | None = None
    at_most: float | None = None

    @model_validator(mode="after")
    def _one_bound(self) -> "LengthRatio":
        if (self.at_least is None) == (self.at_most is None):
            raise ValueError("give exactly one of 'at_least' and 'at_most'")
        return self


class Trend(_AtLengths):
    kind: Literal["trend"]
    variant: str | None = Field(None, description="A variant whose rows differ along `axis`.")
    variants: list[str] | None = Field(None, min_length=2, description="Or the rows, any order: sorted by `axis`.")
    axis: str = Field(description="Dotted config key the rows are ordered by, e.g. model.d_dape.")
    direction: Literal["increasing", "decreasing"]
    tolerance: float = Field(0.0, ge=0, description="Each step may go the wrong way by this fraction.")

    @model_validator(mode="after")
    def _rows(self) -> "Trend":
        if (self.variant is None) == (self.variants is None):
            raise ValueError("give exactly one of 'variant' and 'variants'")
        return self


class Order(_AtLengths):
    kind: Literal["order"]
    variants: list[str] = Field(min_length=2, description="The variants, in the claimed order of the metric.")
    direction: Literal["increasing", "decreasing"]


class Best(_AtLengths):
    kind: Literal["best"]
    variant: str
    among: list[str] | None = Field(None, min_length=2, description="Default: every variant of the study.")
    direction: Literal["lowest", "highest"]


class Bound(_AtLengths):
    kind: Literal["bound"]
    variants: list[str] | None = Field(None, min_length=1, description="Default: every variant of the study.")
    at_least: float | None = None
    at_most: float | None = None

    @model_validator(mode="after")
    def _one_bound(self) -> "Bound":
        if (self.at_least is None) == (self.at_most is None):
            raise ValueError("give exactly one of 'at_least' and 'at_most'")
        return self


Claim = Annotated[Union[Compare, LengthRatio, Trend, Order, Best, Bound], Field(discriminator="kind")]


# --- resolving claims against the study's rows -------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    """A report row a claim reads: its label (the trials' `label`), grid point and resolved config."""

    label: str
    point: tuple  # the swept values, sorted: rows of one grid point are compared with each other
    config: Any  # dape_core.ExperimentConfig


def study_rows(study: "Study") -> list[tuple["Cell", Row]]:
    from dape_core import ExperimentConfig

    from .overrides import resolve

    rows = []
    for cell in study.cells():
        config = ExperimentConfig(**resolve(study.base, cell.overrides))
        rows.append((cell, Row(cell.label, tuple(sorted((k, repr(v)) for k, v in cell.swept.items())), config)))
    return rows


def config_value(config: Any, dotted: str) -> Any:
    node = config
    for part in dotted.split("."):
        if node is None or not hasattr(node, part):
            raise KeyError(dotted)
        node = getattr(node, part)
    return node


def baseline_variant(study: "Study") -> str | None:
    marked = [variant.label for variant in study.variants if variant.baseline]
    return marked[0] if marked else study.report.baseline


def select(study: "Study", rows: list[tuple["Cell", Row]], name: str, where: dict[str, Any]) -> list[Row]:
    """The rows `name` (a row label, a variant label, or 'baseline') and `where` address; ValueError if none."""
    if name == "baseline":
        name = baseline_variant(study) or ""
        if not name:
            raise ValueError("'baseline': the study marks no variant baseline: true")
    chosen = [row for cell, row in rows if cell.label == name] or [row for cell, row in rows if cell.variant == name]
    if not chosen:
        variants = sorted({cell.variant for cell, _ in rows})
        raise ValueError(f"{name!r} is not a variant or row of this study; variants: {variants}")
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
    if isinstance(length, int):
        return length
    match = _MULTIPLE.match(str(length).strip())
    if not match:
        raise ValueError(f"length {length!r}: expected a token count or a multiple such as '8x'")
    train = row.config.che.train_max_length if row.config.che is not None else row.config.train.seq_len
    return int(round(float(match.group(1)) * train))


def row_metrics(row: Row) -> tuple[set[str], dict[str, list[int]]]:
    """(single metrics, length family -> lengths) that a finished trial of this row logs."""
    cfg = row.config
    single = {"train_loss", "train_seconds", "eval_seconds", "tokens_seen", "num_parameters", "flops_per_token",
              "peak_memory_mb", "ms_per_step"}
    if cfg.train.eval_every:
        single.add("val_loss")
    if cfg.che is not None:
        return single | {"che_acc_train", "che_acc_test"}, {"acc": list(cfg.che.test_lengths)}
    lengths = list(cfg.eval.lengths)
    families = {"ppl": lengths, "delta_p": lengths}
    if cfg.eval.timing:
        families["ms_forward"] = lengths
    return single, families


def metric_column(row: Row, metric: str, length: Length | None) -> str:
    """The results column of `metric` at `length` for this row; ValueError naming what exists."""
    single, families = row_metrics(row)
    if length is None:
        if metric in single:
            return metric
        if metric in families:
            raise ValueError(f"metric {metric!r} is logged per length: give 'at' (lengths {families[metric]})")
        raise ValueError(f"unknown metric {metric!r}; this study logs {sorted(single | set(families))}")
    if metric in single:
        raise ValueError(f"metric {metric!r} has no lengths: drop 'at' (per-length metrics: {sorted(families)})")
    if metric not in families:
        raise ValueError(f"unknown metric {metric!r}; this study logs {sorted(single | set(families))} "
                         f"({', '.join(sorted(families))} per length)")
    tokens = length_of(row, length)
    if tokens not in families[metric]:
        raise ValueError(f"length {length!r} (= {tokens}) is not evaluated for {row.label!r}; "
                         f"its lengths: {families[metric]}")
    return f"{metric}_{tokens}"


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
    below = claim.direction == "below"
    shift = 0.0 if claim.margin is None else (-claim.margin if below else claim.margin)
    return _pair_checks(claim, pairs, "<" if below else ">", claim.ratio or 1.0, shift)


def _length_ratio(study, rows, claim: LengthRatio) -> list[Check]:
    checks = []
    for row in select(study, rows, claim.variant, claim.where):
        term = Term(row.label, metric_column(row, claim.metric, claim.at), metric_column(row, claim.metric, claim.over))
        bound = claim.at_least if claim.at_least is not None else claim.at_most
        checks.append(Check(term, ">" if claim.at_least is not None else "<", None, shift=bound))
    return checks


def _trend(study, rows, claim: Trend) -> list[Check]:
    names = claim.variants or [claim.variant]
    chosen = [row for name in names for row in select(study, rows, name, claim.where)]
    groups: dict[tuple, list[Row]] = {}
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
    return [Check(Term(row.label, metric_column(row, claim.metric, length)),
                  ">" if claim.at_least is not None else "<", None, shift=bound)
            for length in _lengths(claim) for row in chosen]


_CHECKS = {"bound": _bound, "compare": _compare, "length_ratio": _length_ratio, "trend": _trend, "order": _order, "best": _best}


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
            claim_checks(study, claim, rows)
        except ValueError as error:
            problems.append(f"expect[{index}] ({claim.id}): {error}")
    return problems

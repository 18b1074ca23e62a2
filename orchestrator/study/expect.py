"""The `expect:` section of a study file: the paper's claims about the results, as data, so that the report
can say which ones this run reproduces (orchestrator/judging/claims.py evaluates them).

Each claim has a `kind`, an `id` (its MLflow tag is `claim.<id>`), the `source` it comes from (the paper's
table or figure) and the rows and metric it is about:

- `compare`: `variant`'s metric `below`/`above` `than`'s (a variant, or `baseline`), optionally by a
  `margin` (A <= B - margin) or a `ratio` (A <= ratio x B; above: A >= ratio x B), at lengths `at`; with
  `over`, each side is its metric at `at` over its metric at `over` (the gap grows with the length:
  DAPE's ppl(8x)/ppl(1x) below Kerple's); `within` bounds how far: below by less than that fraction
  ((1 - within) x B < A < B), above likewise, or with no `direction` either way ((1 ± within) x B);
  `min_effect` is the smallest relative effect that matters (0.01: 1%): "holds" then needs A below
  (1 - min_effect) x B (above: beyond (1 + min_effect) x B), so that a real but negligible difference
  does not decide the claim (docs/deciding.md);
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
resolved config has that value; a list of values: any of them). Comparisons pair rows of the same grid
point. Lengths in `at`/`over` are token counts, or multiples of the row's training length ("8x"). `metric` is a
family with lengths (`ppl`, `delta_p`, `ms_forward`, `acc`) or a single metric (`che_acc_test`, `ms_per_step`,
`train_loss`, ...).

A claim without `text:` is stated in words generated from its fields (`statement`), never by its kind alone.

claim_checks.py turns a claim into concrete checks on the study's rows, and reports what it cannot resolve.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Length = Union[int, str]  # tokens, or "<N>x": N times the row's training length
_MULTIPLE = re.compile(r"^(\d+(?:\.\d+)?)x$")


def length_tokens(length: Length, train_length: int) -> int:
    """A length in tokens: itself, or "<N>x" times `train_length`; ValueError for anything else."""
    if isinstance(length, int) and not isinstance(length, bool):
        return length
    match = _MULTIPLE.match(str(length).strip())
    if not match:
        raise ValueError(f"length {length!r}: expected a token count or a multiple such as '8x'")
    return int(round(float(match.group(1)) * train_length))


def later_length(value: Any) -> Any:
    """A length of `report.lengths`: a positive token count or a positive multiple such as "16x"."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"expected a token count or a multiple such as '16x', got {value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError(f"a length must be a positive token count, got {value}")
        return value
    match = _MULTIPLE.match(value.strip())
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"expected a positive token count or a positive multiple of the training length such "
                         f"as '16x', got {value!r}")
    return value.strip()


class _Claim(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="Names the claim: MLflow tag claim.<id>.")
    source: str = Field(min_length=1, description="Where the paper states it, e.g. 'DAPE V2 Table 1'.")
    text: str = Field("", description="The claim in words, as the report shows it.")
    metric: str = Field("ppl", description="ppl, delta_p, ms_forward, acc (with lengths) or a single metric "
                        "such as che_acc_test, ms_per_step, train_loss.")
    where: dict[str, Any] = Field(default_factory=dict, description="Dotted key -> value: only the rows whose "
                                  "config has that value (e.g. {model.pos_encoding: rope}).")
    min_seeds: int = Field(1, ge=1, description="Fewer finished seeds than this: inconclusive. With 2 or more, "
                           "the verdict is a paired test by seed (Holm-corrected across the study's claims; with "
                           "`decide`, at its planned looks): docs/deciding.md.")

    @property
    def statement(self) -> str:
        """The claim in words: its `text`, else words generated from its fields (`generated_statement`)."""
        return self.text or generated_statement(self)


def _lengths_words(at: Any) -> str:
    if at is None:
        return ""
    lengths = at if isinstance(at, list) else [at]
    return " at " + ", ".join(str(length) for length in lengths)


def _names(names: list[str] | None, default: str = "every variant") -> str:
    return ", ".join(names) if names else default


def _than(name: str) -> str:
    return "the baseline" if name == "baseline" else name


def _bound_words(at_least: float | None, at_most: float | None) -> str:
    return f"at least {at_least:g}" if at_least is not None else f"at most {at_most:g}"


def generated_statement(claim: Any) -> str:
    """A claim's statement in words from its fields, for a claim without `text:` ("DAPE below the baseline in
    ppl at 1x, 8x"), so that the report never shows a bare kind."""
    metric = claim.metric
    if claim.kind == "compare":
        than = _than(claim.than)
        if claim.over is not None:
            subject = f"{claim.variant}'s {metric}{_lengths_words(claim.at)} over its {metric} at {claim.over}"
            than = f"{than}'s"
        else:
            subject = f"{claim.variant}'s {metric}{_lengths_words(claim.at)}"
        if claim.direction is None:
            words = f"{subject} within {claim.within:.0%} of {than}"
        else:
            words = f"{subject} {claim.direction} {than}"
            if claim.within is not None:
                words += f", by less than {claim.within:.0%}"
            elif claim.margin is not None:
                words += f" by at least {claim.margin:g}"
            elif claim.ratio is not None:
                words += f" (at most {claim.ratio:g}x)" if claim.direction == "below" else \
                    f" (at least {claim.ratio:g}x)"
    elif claim.kind == "length_ratio":
        words = (f"{claim.variant}'s {metric} at {claim.at} over its {metric} at {claim.over} "
                 f"{_bound_words(claim.at_least, claim.at_most)}")
    elif claim.kind == "trend":
        rows = claim.variant if claim.variant is not None else _names(claim.variants)
        tolerance = f" (each step within {claim.tolerance:.0%} the other way)" if claim.tolerance else ""
        words = f"{metric}{_lengths_words(claim.at)} {claim.direction} with {claim.axis} for {rows}{tolerance}"
    elif claim.kind == "order":
        words = f"{metric}{_lengths_words(claim.at)} {claim.direction} in the order {', '.join(claim.variants)}"
    elif claim.kind == "best":
        words = (f"{claim.variant} the {claim.direction} {metric}{_lengths_words(claim.at)} among "
                 f"{_names(claim.among)}")
    elif claim.kind == "bound":
        words = (f"{metric}{_lengths_words(claim.at)} of {_names(claim.variants)} "
                 f"{_bound_words(claim.at_least, claim.at_most)}")
    else:  # a kind added without words here
        words = claim.kind
    if claim.where:
        words += " where " + ", ".join(f"{key} = {value}" for key, value in claim.where.items())
    return words


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
    direction: Literal["below", "above"] | None = Field(None, description="Required, unless `within` is given "
                                                         "alone: then A lies within that fraction of B either way.")
    margin: float | None = Field(None, ge=0, description="below: A <= B - margin; above: A >= B + margin.")
    ratio: float | None = Field(None, gt=0, description="below: A <= ratio x B; above: A >= ratio x B.")
    within: float | None = Field(None, gt=0, lt=1, description="below: (1 - within) x B < A < B (below, by less "
                                 "than that fraction); above: B < A < (1 + within) x B; no direction: both bounds.")
    over: Length | None = Field(None, description="Compare metric(at)/metric(over) of each side instead.")
    min_effect: float | None = Field(None, gt=0, lt=1, description="The smallest effect that matters, as a "
                                     "fraction of B (0.01: 1%): holds only where A is below (1 - min_effect) x B "
                                     "(above: beyond (1 + min_effect) x B), significantly; a smaller real "
                                     "difference stays inconclusive. Not with margin, ratio or within, which "
                                     "state the bound themselves.")

    @model_validator(mode="after")
    def _one_bound(self) -> "Compare":
        given = [name for name in ("margin", "ratio", "within", "min_effect") if getattr(self, name) is not None]
        if len(given) > 1:
            raise ValueError(f"give one of 'margin', 'ratio', 'within' and 'min_effect', not {' and '.join(given)}"
                             + (" (min_effect is a ratio bound: ratio 0.99 is below by at least 1%)"
                                if "min_effect" in given else ""))
        if self.min_effect is not None and self.direction is None:
            raise ValueError("min_effect needs a 'direction' (below or above): the effect is beyond B on that side")
        if self.direction is None and self.within is None:
            raise ValueError("give 'direction' (below or above), or 'within' for a band on both sides")
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

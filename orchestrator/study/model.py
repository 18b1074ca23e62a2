"""The study format: pydantic models of a study file's fields and the checks between them.

A study is a `base` trial config (the model/data/train/eval sections of `dape_core.ExperimentConfig`) and
the ways it is varied:
- `axes`: a grid over dotted keys (`model.kernel_size: [1, 3, 5]`), or, with `one_at_a_time: true`, each
  axis varied alone from the baseline's values while the others stay put;
- `zip`: dotted keys whose value lists vary together (kernel size with a cost-matched D_dape);
- `exclude`: partial assignments whose combinations are dropped;
- `variants`: named rows (a label plus dotted overrides), one of which may be the baseline;
- `seeds`: repeats of every row;
- `search`: grid (the default: the rows above), random or Optuna TPE over declared distributions, for one
  metric or several (a multi-objective search: a Pareto set);
- `profiles`: named dotted overrides of the study itself (`base.train.steps: 50000`, `resources.gpus: 1`);
- `report`: the report's headline metric family and its baseline row;
- `resources`: what one trial takes: CPUs and GPUs per worker, and its size (workers, parallelism), which
  a row's own `distributed.*` overrides;
- `expect`: the paper's claims about the results, checked by the report (expect.py).
- `published`: the papers' numbers for a profile's setting, each with where the paper gives it (its table or
  section, its own name for the row and setting, the column), shown beside the measured cells by that
  profile's report (resolved against its rows in published_checks.py); `unpublished`: why a profile has none.
The rows these make are in `rows.py`; loading and profiles in `load.py`, the checks that need every resolved
trial in `trial_checks.py`, `sweeps.py` and `search_checks.py`, the claims' in `claim_checks.py`. Constraints
on single fields are in the types.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    WithJsonSchema,
    field_validator,
    model_validator,
)

import dape_core.metric_names as names
from dape_core.train import Parallelism
from dape_core.types import (
    FiniteFloat,
    NonEmptyStr,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Seed,
    StrictBool,
)

from .expect import Claim, later_length, length_tokens
from .metric_families import PPL, ReportMetric
from .overrides import resolve
from .rows import Cell, comparisons, study_cells

SECTIONS = ("model", "data", "train", "eval", "che", "distributed")  # dape_core.ExperimentConfig's sections
LaterLength = Annotated[Any, AfterValidator(later_length), WithJsonSchema(  # report.lengths: 4096 or "16x"
    {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": r"^\d+(\.\d+)?x$"}]})]
KeepWeights = Literal["final", "none"]  # what a finished trial keeps of its model (README "Weights kept")

# MLflow's limits (3.17): an experiment name may have 500 characters (mlflow/utils/validation.py,
# MAX_EXPERIMENT_NAME_LENGTH) but its database column has 256, and a run name's column 250
# (mlflow/store/tracking/dbmodels/models.py; PostgreSQL enforces them, SQLite does not). The study's name
# is the experiment's and its parent run's name; a trial's run is named "<label> · s<seed>".
MAX_RUN_NAME = 250
MAX_LABEL = MAX_RUN_NAME - len(" · s4294967295")  # room for the seed suffix of the longest seed


def _sweep_key(key: str) -> str:
    if key.split(".")[0] not in SECTIONS or "." not in key:
        raise ValueError(f"{key!r} must be a dotted key starting with one of the sections {', '.join(SECTIONS)}")
    return key


def _distinct(values: list) -> list:
    repeated = [value for index, value in enumerate(values) if value in values[:index]]
    if repeated:
        raise ValueError(f"{repeated[0]!r} is listed more than once in {values}: each value runs once")
    return values


SweepKey = Annotated[str, AfterValidator(_sweep_key)]  # a dotted key of a trial config: model.kernel_size
SweepValues = Annotated[list[Any], Field(min_length=1), AfterValidator(_distinct)]
ZipValues = Annotated[list[Any], Field(min_length=1)]  # one key may repeat a value; a repeated point may not
Seeds = Annotated[list[Seed], Field(min_length=1), AfterValidator(_distinct)]
StudyName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=MAX_RUN_NAME)]
Label = Annotated[str, Field(min_length=1, max_length=MAX_LABEL)]
ReductionFactor = Annotated[FiniteFloat, Field(gt=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Variant(_Strict):
    label: Label = Field(description="Row name in the report, e.g. 'DAPE1x3-Kerple'.")
    baseline: StrictBool = Field(False, description="The variant other rows are compared against.")
    set: dict[SweepKey, Any] = Field(default_factory=dict, description="Dotted-key overrides of `base`.")


class Resources(_Strict):
    """What one trial takes. A trial runs on `workers` processes (one by default), each with `cpus` CPUs
    and `gpus` GPUs; a trial config's own `distributed.workers` / `distributed.parallelism` (set in base, a
    variant, an axis or a zip) overrides `workers` / `parallelism` for its rows."""

    cpus: PositiveFloat = Field(1.0, description="CPUs per worker (also its torch threads).")
    gpus: NonNegativeFloat = Field(0.0, description="GPUs per worker; fractions share a GPU (one-worker trials only).")
    workers: PositiveInt = Field(1, description="Workers per trial: processes that train one trial together "
                                 "(Ray Train), each with `cpus` and `gpus`. One runs the trial as a plain "
                                 "Ray Tune trial.")
    parallelism: Parallelism = Field("ddp", description="How several workers share a trial: ddp (a full replica "
                                     "each) or fsdp (parameters, gradients and optimizer state sharded).")
    max_concurrent: PositiveInt | None = Field(None, description="At most this many trials at once.")
    max_retries: NonNegativeInt = Field(1, description="Times a crashed trial is retried.")
    gpu_memory_gb: PositiveFloat | None = Field(None, description="Device memory per GPU, for `plan`'s fit check "
                                                "and the feasibility check of validate, plan and run.")
    max_hours: PositiveFloat = Field(720.0, description="A trial whose estimated training time (the plan's) is "
                                     "longer is refused by validate, plan and run before anything launches.")

    def trial_size(self, config: dict) -> dict:
        """A trial config with its `distributed` section complete: the trial's own values, else these."""
        given = config.get("distributed", {})
        if not isinstance(given, dict):
            return config  # not a mapping: dape_core's validation says so, with the field
        return {**config, "distributed": {"workers": self.workers, "parallelism": self.parallelism, **given}}


class Distribution(_Strict):
    """A search dimension: `choice` (values), `uniform`/`loguniform` (low, high), `int` (low, high)."""

    type: Literal["choice", "uniform", "loguniform", "int"]
    values: SweepValues | None = None
    low: FiniteFloat | None = None
    high: FiniteFloat | None = None

    @model_validator(mode="after")
    def _complete(self) -> "Distribution":
        if self.type == "choice":
            if not self.values:
                raise ValueError("a 'choice' distribution needs a non-empty 'values' list")
        else:
            if self.low is None or self.high is None:
                raise ValueError(f"a {self.type!r} distribution needs 'low' and 'high'")
            if not self.low < self.high:
                raise ValueError(f"'low' ({self.low}) must be below 'high' ({self.high})")
            if self.type == "loguniform" and self.low <= 0:
                raise ValueError("a 'loguniform' distribution needs low > 0")
            if self.type == "int" and not (self.low.is_integer() and self.high.is_integer()):
                raise ValueError(f"an 'int' distribution needs whole-number bounds (got {self.low}, {self.high})")
        return self


GRID: Final = "grid"  # search.algorithm of a study whose rows are its trials (axes, zip); the others sample a space


Mode = Literal["min", "max"]


class Search(_Strict):
    algorithm: Literal["grid", "random", "optuna"] = GRID
    num_samples: PositiveInt = Field(1, description="Configurations sampled (random/optuna).")
    metric: NonEmptyStr | Annotated[list[NonEmptyStr], Field(min_length=1)] = Field(
        names.VAL_LOSS, description="Metric the searcher and scheduler optimise (validation checks that every "
        "trial logs it), or a list of metrics (`[ppl_256, ms_per_step]`): a multi-objective search, whose "
        "report gives the Pareto set of the samples (Optuna's multi-objective TPE; no ASHA).")
    mode: Mode | Annotated[list[Mode], Field(min_length=1)] = Field(
        "min", description="min or max: each metric's direction; a list gives one per metric of a list, a single "
        "one applies to every metric.")
    space: dict[SweepKey, Distribution] = Field(default_factory=dict, description="Dotted key -> distribution.")
    seed: Seed = 0

    @property
    def sampled(self) -> bool:
        """A sampling search (random, optuna): Tune draws num_samples configurations of `space` for each row, and
        a sampled trial has no identity before it is drawn. Otherwise a grid: each row is one trial. The one
        test of grid versus sampled; every floor reads it."""
        return self.algorithm != GRID

    @property
    def samples_per_row(self) -> int:
        """The trials each row becomes: num_samples for a sampling search, one for a grid."""
        return self.num_samples if self.sampled else 1

    @property
    def metrics(self) -> list[str]:
        """The searched metrics, one or several (a multi-objective search)."""
        return list(self.metric) if isinstance(self.metric, list) else [self.metric]

    @property
    def modes(self) -> list[str]:
        """Each searched metric's direction."""
        return list(self.mode) if isinstance(self.mode, list) else [self.mode] * len(self.metrics)

    @property
    def multi_objective(self) -> bool:
        """Several metrics: the search has a Pareto set rather than one best sample."""
        return len(self.metrics) > 1

    @property
    def primary_metric(self) -> str:
        """The first searched metric: the one a single-metric reader (history plots, the grid comparison) reads."""
        return self.metrics[0]

    @field_validator("metric", "mode")
    @classmethod
    def _one_is_one(cls, value):
        """A list of one is that one: a single-metric search reads `metric` and `mode` as strings."""
        return value[0] if isinstance(value, list) and len(value) == 1 else value

    @model_validator(mode="after")
    def _directions(self) -> "Search":
        if isinstance(self.mode, list) and len(self.mode) != len(self.metrics):
            raise ValueError(f"mode: {len(self.mode)} direction(s) for {len(self.metrics)} metric(s) "
                             f"({', '.join(self.metrics)}); give one per metric, or one for all")
        repeated = [metric for index, metric in enumerate(self.metrics) if metric in self.metrics[:index]]
        if repeated:
            raise ValueError(f"metric: {repeated[0]!r} is listed more than once")
        if self.multi_objective and not self.sampled:
            raise ValueError("metric: several metrics are for a sampling search (algorithm optuna or random); "
                             "a grid's rows are its trials, and its report draws their cost front")
        return self

    @model_validator(mode="after")
    def _space_for_samplers(self) -> "Search":
        if self.sampled and not self.space:
            raise ValueError(f"search.algorithm {self.algorithm!r} needs a 'space' of distributions")
        if not self.sampled and self.space:
            raise ValueError("search.space is for random/optuna; a grid is declared with 'axes'")
        return self


class Scheduler(_Strict):
    type: Literal["none", "asha"] = "none"
    metric: NonEmptyStr | None = Field(None, description="Defaults to search.metric; one the trials report "
                                       "while training (train_loss, or val_loss with train.eval_every).")
    grace_period: PositiveInt = Field(100, description="Steps every trial runs before it may be stopped "
                                      "(at most the trials' train.steps).")
    reduction_factor: ReductionFactor = 3


class ReportSpec(_Strict):
    metric: ReportMetric = Field(PPL.name, description="The report's headline metric family, its first table: "
                                 "ppl (perplexity by length), delta_p (ΔP by length), accuracy (CHE tasks), "
                                 "time (ms per step, seconds). The other families follow.")
    baseline: str | None = Field(None, description="The rows' baseline: a variant's label (its row at each grid "
                                 "point is the baseline of that point) or one row's label (the baseline of every "
                                 "row); default: the variant marked baseline: true.")
    lengths: list[LaterLength] = Field(default_factory=list, description="Lengths evaluated after training by "
                                       "`orchestrator evaluate STUDY` (token counts, or multiples of each trial's "
                                       "training length such as '16x'); claims may name them. Not part of any "
                                       "trial's identity: adding one retrains nothing.")

    def later_lengths(self, train_length: int, own: list[int]) -> list[int]:
        """The token counts of `lengths` for a trial trained at `train_length` that its own `eval.lengths`
        (`own`) lack; lengths below the training length are not evaluated (as `orchestrator evaluate`)."""
        tokens = {length_tokens(length, train_length) for length in self.lengths}
        return sorted(length for length in tokens if length >= train_length and length not in own)


class PaperLocation(_Strict):
    """Where a paper gives a published value, in the paper's own words, so that a reader finds it in minutes:
    the paper, its table or section (or the authors' rebuttal where the number is only there), the paper's own
    name for the row (which may differ from this study's label: "DAPE-NoPE" beside our DAPE row) and the
    setting it was measured in, and the column."""

    paper: NonEmptyStr = Field(description="The paper: 'DAPE' or 'DAPE V2'.")
    table: NonEmptyStr = Field(description="The table, figure or section that gives the number, as the source names "
                               "it; 'rebuttal (...)' where it is given only in the authors' rebuttal.")
    row: NonEmptyStr = Field(description="The paper's own name for the row: 'DAPE-NoPE', 'Kerple', ...")
    setting: NonEmptyStr = Field(description="The paper's setting of the number: dataset, model size, training "
                                 "length, ... as far as the source states them.")
    column: NonEmptyStr = Field(description="The column (an evaluation length, a model size, a task), with what the "
                                "source leaves implicit said so.")

    def text(self) -> str:
        return f"{self.paper}, {self.table}: row {self.row} ({self.setting}), column {self.column}"


class PublishedValue(_Strict):
    """One number a paper reports for a row of this study at a profile (docs: "Cost, fronts and the papers'
    numbers"): the report of that profile shows it beside the measured cell, with the difference. Validated
    against the profile's rows like a claim: the variant, the grid point, the metric and the length must name
    a cell the profile's trials fill."""

    variant: Label = Field(description="A variant's label or a row's label, as the report names it.")
    where: dict[SweepKey, Any] = Field(default_factory=dict, description="The grid point (config keys and values, "
                                       "e.g. {model.pos_encoding: nope}) in a study with axes or zip.")
    metric: NonEmptyStr = Field(description="A per-length family (ppl, delta_p, ms_forward, acc) with `length`, "
                                "or a one-number metric (ms_per_step, che_acc_test, ...) without it.")
    length: PositiveInt | None = Field(None, description="The evaluation length (tokens) of a per-length metric.")
    value: FiniteFloat = Field(description="The published number, in the unit the report shows (perplexity; "
                               "ms; accuracy as a fraction 0..1).")
    location: PaperLocation = Field(description="Where the paper gives it and under which name: paper, table or "
                                    "section ('rebuttal ...' where it is only there), the paper's row and setting, "
                                    "column. Required: a number no reader can find in the paper is not shown.")
    note: NonEmptyStr | None = Field(None, description="What is known and what is assumed in reading the number "
                                     "as this metric (its unit, what was timed), shown beside it in the report.")

    def where_text(self) -> str:
        """The location as the report and the docs show it: 'DAPE V2, rebuttal (...), row DAPE-NoPE, column 8192'."""
        return self.location.text()


class Decide(_Strict):
    """Seeds added until the claims are decided (`orchestrator run STUDY --decide`, or this section): the rows
    train `min_seeds` seeds, the claims are judged, and only the rows that undecided claims read get `batch`
    more seeds, a look at a time, until every claim is decided, `max_seeds` is reached or a budget is spent.
    The looks are planned (min_seeds, min_seeds + batch, ..., max_seeds), so the decision rule's error rate
    holds however many of them are taken (docs: "Claims and decisions")."""

    min_seeds: Annotated[int, Field(ge=2)] = Field(2, description="Seeds every row trains before the first look "
                                                   "(at least 2: one seed says nothing of the seed-to-seed spread).")
    max_seeds: PositiveInt = Field(10, description="Seeds a row trains at most.")
    batch: PositiveInt = Field(2, description="Seeds added at each later look to the rows undecided claims read.")
    budget_trials: PositiveInt | None = Field(None, description="At most this many trials in all (every row's "
                                              "seeds included); none: no limit.")
    budget_gpu_hours: PositiveFloat | None = Field(None, description="At most this many GPU-hours, from the plan's "
                                                   "estimate per trial; none: no limit.")
    alpha: Annotated[float, Field(gt=0, lt=0.5)] = Field(0.05, description="The study's error rate: the chance "
                                                         "that any claim is decided wrongly (Holm across claims).")
    shared_variance: StrictBool = Field(False, description="Judge the claims with the seed-to-seed variance "
                                        "estimated jointly over all of them (empirical-Bayes shrinkage, a "
                                        "moderated t-test: docs/deciding.md).")

    @model_validator(mode="after")
    def _ordered(self) -> "Decide":
        if self.max_seeds < self.min_seeds:
            raise ValueError(f"max_seeds ({self.max_seeds}) is below min_seeds ({self.min_seeds})")
        return self

    def looks(self) -> list[int]:
        """The planned seed counts at which the claims are judged: min_seeds, then every batch, then max_seeds."""
        counts = list(range(self.min_seeds, self.max_seeds + 1, self.batch))
        return counts if counts[-1] == self.max_seeds else [*counts, self.max_seeds]

    def first_seeds(self, seeds: list[int]) -> list[int]:
        """The seeds every row trains before the first look: the first min_seeds of `seed_order`."""
        return self.seed_order(seeds)[: self.min_seeds]

    def seed_order(self, seeds: list[int]) -> list[int]:
        """The seeds a row trains, in the order they are added: the study's `seeds`, then the next integers
        above them, up to max_seeds in all. A look at n seeds reads the first n of this list."""
        order = list(seeds[: self.max_seeds])
        candidate = max(seeds) + 1
        while len(order) < self.max_seeds:
            order.append(candidate)
            candidate += 1
        return order


class Study(_Strict):
    name: StudyName = Field(description="Experiment name in MLflow (and its parent run's).")
    description: str = ""
    base: dict[str, Any] = Field(default_factory=dict, description="Shared trial config: model, data, train, eval "
                                                                   "(and che for CHE tasks, distributed for the trial "
                                                                   "size).")
    axes: dict[SweepKey, SweepValues] = Field(default_factory=dict, description="Grid over dotted keys.")
    one_at_a_time: StrictBool = Field(False, description="Vary each axis alone from the baseline instead of a grid.")
    zip: dict[SweepKey, ZipValues] = Field(default_factory=dict, description="Dotted keys whose values vary together.")
    exclude: list[dict[SweepKey, Any]] = Field(default_factory=list, description="Partial assignments of axis/zip "
                                               "values to drop.")
    variants: list[Variant] = Field(default_factory=list, min_length=1, description="Named rows; leave the key "
                                    "out to run the base alone.")
    plugins: list[str] = Field(default_factory=list, description="Modules of yours that register position "
                               "encodings, score processors or forms (dape_core.components; docs/extending.md): a "
                               ".py file beside the study (it travels with the study to every worker) or a module "
                               "name (it must be importable where trials run). Loaded before the study is "
                               "validated; what they register is audited for causality before a trial launches.")
    seeds: Seeds = Field(default_factory=lambda: [0], description="Every row runs once per seed (the only place "
                         "train.seed is set).")
    search: Search = Field(default_factory=Search)
    scheduler: Scheduler = Field(default_factory=Scheduler)
    resources: Resources = Field(default_factory=Resources)
    profiles: dict[str, dict[str, Any]] = Field(default_factory=dict, description="Named dotted overrides of the "
                                                                                  "study.")
    report: ReportSpec = Field(default_factory=ReportSpec)
    keep_weights: KeepWeights = Field("final", description="What a finished trial keeps as an artifact of its "
                                      "MLflow run: final (its trained model: safetensors weights, effective config "
                                      "and data hash, for `orchestrator evaluate`) or none. Not part of a trial's "
                                      "identity.")
    expect: list[Claim] = Field(default_factory=list, description="Claims about the results (the paper's), "
                                "each with its source; the report gives each a verdict.")
    published: dict[str, list[PublishedValue]] = Field(default_factory=dict, description="The papers' numbers for "
                                                        "a profile: profile name -> values; the report of that "
                                                        "profile shows each beside the measured cell.")
    unpublished: dict[str, NonEmptyStr] = Field(default_factory=dict, description="Profile name -> one line on why "
                                                "the papers give no number for that profile's setting; its report "
                                                "says it where the published values would stand.")
    decide: Decide | None = Field(None, description="Add seeds until the claims are decided (min_seeds to "
                                  "max_seeds, a batch at a time, within an optional budget); `run --decide` "
                                  "applies the defaults to a study without this section.")
    # Each row's validated config, kept by the validation that resolved them (load.py) so that expanding the
    # study reads them instead of resolving every row again (trial_checks.py's `resolved_rows`).
    _rows: tuple | None = PrivateAttr(default=None)
    # The profile this study was loaded with (load.py), None for the file as written: which `published` values
    # its report shows.
    _profile: str | None = PrivateAttr(default=None)
    # The plugins loaded for this study (dape_core.plugins.Plugin), set by load.py: what travels to the trials.
    _plugins: tuple = PrivateAttr(default=())

    def plugin_payloads(self) -> tuple[dict, ...]:
        """What each trial's process needs to load the study's plugins (dape_core/plugins.py)."""
        return tuple(plugin.payload() for plugin in self._plugins)

    @field_validator("zip")
    @classmethod
    def _zip_lengths(cls, values: dict[str, list[Any]]) -> dict[str, list[Any]]:
        lengths = {key: len(items) for key, items in values.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"zipped lists must have equal lengths, got {lengths}")
        return values

    @model_validator(mode="after")
    def _consistent(self) -> "Study":
        labels = [variant.label for variant in self.variants]
        duplicates = sorted({label for label in labels if labels.count(label) > 1})
        if duplicates:
            raise ValueError(f"variants: duplicate label(s) {duplicates}; each row of the report needs its own name")
        if sum(variant.baseline for variant in self.variants) > 1:
            raise ValueError("variants: more than one variant is marked baseline: true; mark exactly one")
        if self.search.sampled and (self.axes or self.zip):
            raise ValueError(
                f"search.algorithm {self.search.algorithm!r} cannot take grid 'axes'/'zip' (Ray Tune's samplers "
                "do not expand grids): declare them in search.space as {type: choice, values: [...]}"
            )
        if self.one_at_a_time and not self.axes:
            raise ValueError("one_at_a_time: true needs 'axes' to vary")
        if self.report.baseline is not None:
            labels = [cell.label for cell in self.cells()]
            variants = [variant.label for variant in self.variants]
            if self.report.baseline not in labels + variants:
                raise ValueError(f"report.baseline {self.report.baseline!r} is neither a variant nor a row of this "
                                 f"study; variants: {variants}; rows: {labels}")
        for section in ("published", "unpublished"):
            unknown = [name for name in getattr(self, section) if name not in self.profiles]
            if unknown:
                raise ValueError(f"{section}: {unknown[0]!r} is not a profile of this study (profiles: "
                                 f"{', '.join(self.profiles) or 'none'}); published values belong to the profile "
                                 "whose setting they match")
        both = [name for name in self.unpublished if self.published.get(name)]
        if both:
            raise ValueError(f"unpublished: profile {both[0]!r} has published values too; say why a profile has "
                             "none only where it has none")
        overlap = set(self.axes) & set(self.zip)
        if overlap:
            raise ValueError(f"keys {sorted(overlap)} appear in both 'axes' and 'zip'; use one")
        return self

    @property
    def baseline_label(self) -> str | None:
        """The first baseline row (a grid has one per grid point: `comparisons`)."""
        marked = [cell.label for cell in self.cells() if cell.baseline]
        return marked[0] if marked else None

    def comparisons(self) -> dict[str, str | None]:
        """Each row's baseline row (None for baseline rows): within its grid point where rows are per point."""
        return comparisons(self.cells())

    def cells(self) -> list[Cell]:
        """The study's rows before seeds: each variant (or the base alone) crossed with the swept points."""
        return study_cells(self, self.variants or [Variant(label=self.name, baseline=True)])

    def published_here(self) -> list[PublishedValue]:
        """The published values of the profile this study was loaded with (none for the file as written)."""
        return list(self.published.get(self._profile, [])) if self._profile is not None else []

    def unpublished_here(self) -> str | None:
        """Why the papers give no number for the profile this study was loaded with (None: not said, or none)."""
        return self.unpublished.get(self._profile) if self._profile is not None else None

    def trial_config(self, overrides: dict[str, Any]) -> dict:
        """The trial config of a row (or a search sample): base, its overrides, and the trial size."""
        return self.resources.trial_size(resolve(self.base, overrides))

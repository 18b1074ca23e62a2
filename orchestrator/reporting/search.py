"""The report of a sampling search (random or Optuna TPE, with or without ASHA): what a researcher ran it for.

- the best configuration and its value of the searched metric (among the samples trained to their end,
  as Optuna counts them: a sample ASHA stopped early never reached the last step);
- every sample with its sampled values, its metric, how many steps it trained and whether ASHA stopped it;
- the optimisation history and the parameters' importance, by Optuna's own functions
  (`optuna.visualization.matplotlib`, `optuna.importance.get_param_importances`) on an Optuna study
  rebuilt from the samples in the MLflow store (`optuna.create_study` + `add_trial`), so they work for a
  search run with Ray Tune, interrupted, or read on another machine;
- where the study file has a grid profile (`--profile grid`, its own experiment), the search's best
  against the grid's best, from the same store when the grid has run there.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pandas as pd

import dape_core.metric_names as names

from ..study import Distribution, Study, StudyError, load_study
from ..tracking.lookup import StudyNotFound
from ..tracking.store import SWEPT_TAG_PREFIX, StudyStore
from .pareto import pareto_mask
from .plots import Plot, save_figure

GRID_PROFILE = "grid"


@dataclass
class GridComparison:
    name: str  # the grid's experiment
    value: float | None  # its best value of the metric (None: it has not run in this store)
    label: str | None
    trials: int
    steps: int  # training steps of all its trials
    note: str = ""


@dataclass
class SearchSection:
    metric: str
    mode: str
    algorithm: str
    scheduler: str
    keys: list[str]  # the searched dotted keys
    samples: pd.DataFrame  # label, status, state (completed | stopped by ASHA | failed | ...), steps, value, keys
    best: pd.Series | None = None
    importances: dict[str, float] = field(default_factory=dict)
    grid: GridComparison | None = None
    metrics: list[str] = field(default_factory=list)  # every searched metric (several: a multi-objective search)
    modes: list[str] = field(default_factory=list)
    pareto: pd.DataFrame | None = None  # a multi-objective search's Pareto set: the completed samples on its front

    @property
    def multi_objective(self) -> bool:
        return len(self.metrics) > 1

    @property
    def steps(self) -> int:
        return int(self.samples["steps"].fillna(0).sum()) if len(self.samples) else 0

    def best_text(self) -> str:
        if self.multi_objective:
            return self.pareto_text()
        if self.best is None:
            return f"No sample trained to its end yet: no best {self.metric}."
        values = ", ".join(f"{key} = {_value(self.best[f'{SWEPT_TAG_PREFIX}{key}'])}" for key in self.keys)
        return (f"Best of {len(self.samples)} sample(s) by {self.metric} ({self.mode}): {values}, with "
                f"{self.metric} = {self.best['value']:.4f} (run {self.best['run_name']}).")


    def pareto_text(self) -> str:
        objectives = " and ".join(f"{metric} ({mode})" for metric, mode in zip(self.metrics, self.modes))
        if self.pareto is None or self.pareto.empty:
            return f"No sample trained to its end with {objectives} yet: no Pareto set."
        members = "; ".join(
            f"{sample['run_name']} (" + ", ".join(f"{metric} = {sample[metric]:.4g}" for metric in self.metrics)
            + "; " + ", ".join(f"{key} = {_value(sample[f'{SWEPT_TAG_PREFIX}{key}'])}" for key in self.keys) + ")"
            for _, sample in self.pareto.iterrows())
        return (f"Pareto set of {len(self.samples)} sample(s) by {objectives}: {len(self.pareto)} sample(s) no other "
                f"completed sample beats on every metric: {members}.")


def _value(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _state(sample: pd.Series) -> str:
    if sample["status"] == "FINISHED":
        return "stopped by ASHA" if sample.get("stopped_early") else "completed"
    return sample["status"].lower()


def sample_table(samples: pd.DataFrame, keys: list[str], history: pd.DataFrame, metric: str,
                 others: Sequence[str] = ()) -> pd.DataFrame:
    """One row per sample in the order they were sampled: its values, state, steps trained and metric (`value`),
    and the other searched metrics of a multi-objective search (`others`) as their own columns."""
    table = samples.sort_values("start_time").copy()
    steps = history.groupby("run_id")["step"].max() if not history.empty else pd.Series(dtype=float)
    table["steps"] = table["run_id"].map(steps)
    table["state"] = [_state(sample) for _, sample in table.iterrows()]
    table["value"] = table[metric] if metric in table else math.nan
    for other in others:
        table[other] = table[other] if other in table else math.nan
    return table[["label", "run_name", "run_id", "status", "state", "steps", "value"] + list(others)
                 + [f"{SWEPT_TAG_PREFIX}{key}" for key in keys]].reset_index(drop=True)


def _distribution(dist: Distribution):
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if dist.type == "choice":
        assert dist.values is not None, "a choice has its values (Distribution's validation)"
        return CategoricalDistribution(dist.values)
    assert dist.low is not None and dist.high is not None, "a range has its bounds (Distribution's validation)"
    if dist.type == "int":
        return IntDistribution(int(dist.low), int(dist.high))
    return FloatDistribution(dist.low, dist.high, log=dist.type == "loguniform")


def optuna_study(study: Study, samples: pd.DataFrame, history: pd.DataFrame):
    """An Optuna study holding the search's samples: completed ones with their metric, ASHA's early stops as
    pruned (with the metric values they reported on the way), failures as failed."""
    import optuna
    from optuna.trial import TrialState, create_trial

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    distributions = {key: _distribution(dist) for key, dist in study.search.space.items()}
    directions: list[Literal["minimize", "maximize"]] = ["minimize" if mode == "min" else "maximize"
                                                         for mode in study.search.modes]
    rebuilt = optuna.create_study(directions=directions, study_name=study.name)
    metrics = study.search.metrics
    for _, sample in samples.iterrows():
        params = {key: _param(sample[f"{SWEPT_TAG_PREFIX}{key}"], distributions[key]) for key in distributions}
        if any(value is None for value in params.values()):
            continue
        mine = history[history["run_id"] == sample["run_id"]]
        intermediate = {int(row.step): float(row.value) for row in mine.itertuples() if math.isfinite(row.value)}
        state = {"completed": TrialState.COMPLETE, "stopped by ASHA": TrialState.PRUNED}.get(sample["state"],
                                                                                             TrialState.FAIL)
        values = [float(sample["value"])] + [float(sample[metric]) for metric in metrics[1:]]
        if state == TrialState.COMPLETE and not all(math.isfinite(value) for value in values):
            state = TrialState.FAIL
        complete = state == TrialState.COMPLETE
        rebuilt.add_trial(create_trial(params=params, distributions=distributions, state=state,
                                       values=values if complete and len(values) > 1 else None,
                                       value=values[0] if complete and len(values) == 1 else None,
                                       intermediate_values=intermediate if len(values) == 1 else None))
    return rebuilt


def _param(value, distribution):
    """A sampled value as its distribution holds it (MLflow tags are text; the frame parsed them)."""
    from optuna.distributions import CategoricalDistribution

    if isinstance(distribution, CategoricalDistribution):
        matches = [choice for choice in distribution.choices if str(choice) == str(value)]
        return matches[0] if matches else None
    try:
        return type(distribution.low)(value)
    except (TypeError, ValueError):
        return None


def optuna_plots(rebuilt, folder: Path) -> tuple[list[Plot], dict[str, float]]:
    """Optuna's optimisation history and parameter importances, as report figures."""
    import optuna

    from .plots import headless

    headless()  # before Optuna imports pyplot
    from optuna.visualization import matplotlib as optuna_plot

    completed = [trial for trial in rebuilt.trials if trial.state == optuna.trial.TrialState.COMPLETE]
    if not completed:
        return [], {}
    figures, importances = [], {}
    with warnings.catch_warnings():  # Optuna marks its matplotlib plots experimental
        warnings.simplefilter("ignore")
        if len(rebuilt.directions) > 1:  # a multi-objective search: its Pareto front, by Optuna's own plot
            if len(rebuilt.directions) > 3:
                return [], {}
            ax = optuna_plot.plot_pareto_front(rebuilt)
            return [Plot("search_pareto", "Pareto front of the search",
                         "Optuna's Pareto-front plot of the completed samples: each sample's searched metrics, the "
                         "samples on the front highlighted.", save_figure(ax.figure, folder, "search_pareto"))], {}
        ax = optuna_plot.plot_optimization_history(rebuilt)
        figures.append(Plot("search_history", "Optimisation history",
                            "Optuna's optimisation history of the search: each completed sample's value of the "
                            "searched metric in sampling order, and the best so far.",
                            save_figure(ax.figure, folder, "search_history")))
        if len(completed) >= 2:
            try:
                importances = optuna.importance.get_param_importances(rebuilt)
                ax = optuna_plot.plot_param_importances(rebuilt)
                figures.append(Plot("search_importances", "Parameter importances",
                                    "Optuna's parameter importances (its default evaluator) over the completed "
                                    "samples: the share of the metric's variation each searched key explains.",
                                    save_figure(ax.figure, folder, "search_importances")))
            except (RuntimeError, ValueError) as error:  # e.g. every completed sample has the same values
                logging.getLogger(__name__).info("no parameter importances: %s", error)
    return figures, importances


def grid_comparison(study: Study, study_path: Path | None, store: StudyStore) -> GridComparison | None:
    """The grid profile's best in the same store, where the study file has a grid profile."""
    if study_path is None or GRID_PROFILE not in study.profiles:
        return None
    try:
        grid = load_study(study_path, profile=GRID_PROFILE)
    except StudyError:
        return None
    try:
        other = StudyStore.open(store.tracking_uri, grid.name)
    except StudyNotFound:
        return GridComparison(grid.name, None, None, 0, 0, f"the grid profile ({grid.name}) has not run in this store: "
                              f"orchestrator run {study_path} --profile {GRID_PROFILE}")
    from .results import metric_history, study_results

    frame = study_results(other, grid)
    done = frame[(frame["status"] == "FINISHED") & frame["in_study"]]
    metric = study.search.primary_metric
    steps = metric_history(other, done, names.TRAIN_LOSS).groupby("run_id")["step"].max().sum() if len(done) else 0
    if metric not in done or done[metric].isna().all():
        return GridComparison(grid.name, None, None, len(done), int(steps), "no finished grid trial has the metric")
    best = done.loc[done[metric].idxmin() if study.search.modes[0] == "min" else done[metric].idxmax()]
    return GridComparison(grid.name, float(best[metric]), best["label"], len(done), int(steps))


def search_section(study: Study, study_path: Path | None, store: StudyStore, samples: pd.DataFrame,
                   history: pd.DataFrame, folder: Path) -> tuple[SearchSection, list[Plot]]:
    """`samples`: the search's runs (results frame rows); `history`: the searched metric's history by run."""
    keys = list(study.search.space)
    search = study.search
    table = sample_table(samples, keys, history, search.primary_metric, search.metrics[1:])
    section = SearchSection(search.primary_metric, search.modes[0], search.algorithm, study.scheduler.type,
                            keys, table, metrics=search.metrics, modes=search.modes)
    completed = table[table["state"] == "completed"].dropna(subset=["value", *search.metrics[1:]])
    if search.multi_objective:
        objectives = completed[["value", *search.metrics[1:]]].rename(columns={"value": search.primary_metric})
        mask = pareto_mask(objectives.to_numpy(dtype=float).tolist(), search.modes)
        section.pareto = completed[mask].assign(**{search.primary_metric: objectives[search.primary_metric][mask]})
    elif len(completed):
        index = completed["value"].idxmin() if search.mode == "min" else completed["value"].idxmax()
        section.best = completed.loc[index]
    plots, section.importances = optuna_plots(optuna_study(study, table, history), folder)
    section.grid = grid_comparison(study, study_path, store)
    return section, plots

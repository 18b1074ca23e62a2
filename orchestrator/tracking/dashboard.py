"""The study's MLflow dashboard: experiment tags that make MLflow's web UI (3.x) open a study on its trial runs
with the charts a researcher wants, instead of the GenAI overview and one chart per logged number.

What MLflow 3.17's UI reads, found in its web app (mlflow/server/js):
- the experiment page's kind (GenAI vs machine learning) comes from the `workflowType` query parameter of
  the page address (`genai` | `machine_learning`), else from a per-browser setting that defaults to GenAI,
  whose page is the traces "Overview"; older UIs read the `mlflow.experimentKind` experiment tag instead.
  The printed address therefore carries `workflowType=machine_learning`, and the tag is set as well;
- the runs page's chart layout and table are a "view state" (charts, sections, hidden runs, columns, search
  filter). There is no experiment-wide default; a *saved view* is an experiment tag
  `mlflow.sharedViewState.<key>` holding `{name, createdAt, updatedAt, state}` (state: the view as JSON),
  listed in the runs page's saved-views menu and opened by the address parameter `viewStateShareKey=<key>`;
- child runs are shown nested (collapsed) under their parent only while the table is sorted by start time,
  and a saved view's expanded rows are not restored: the view sorts by the study's headline metric (a
  leaderboard, best first) and its search filter lists the trial runs, so every trial is a row;
- the chart area adds a chart for every metric that has none in the layout, even a deleted one: the view
  lists every other metric as a deleted chart, so only the chosen charts show.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
import zlib
from dataclasses import dataclass

import dape_core.metric_names as names

EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
TRAINING_KIND = "custom_model_development"  # the UI's "Machine learning" kind
WORKFLOW = "machine_learning"  # the page's workflowType parameter
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
VIEW_KEY = "orchestrator-study"
VIEW_NAME = "Study dashboard (orchestrator)"
TRIAL_FILTER = "tags.`orchestrator.role` = 'trial'"
SECTION = "Model metrics"  # MLflow's section for metrics without a "group/" prefix
_SERIES_WORDS = {names.PPL: "perplexity by evaluation length (x: L)", names.DELTA_P: "ΔP by evaluation length (x: L)",
                 names.ACC: "accuracy by test length (x: L)"}
SERIES = {name: _SERIES_WORDS[prefix] for name, prefix in names.SERIES.items()}  # the recorder's series
SWEPT = "swept."  # store.SWEPT_TAG_PREFIX (not imported: this module must not load MLflow)
CURVES = {names.TRAIN_LOSS: "training loss", names.VAL_LOSS: "validation loss"}


@dataclass(frozen=True)
class StudyMetrics:
    """What the view is made of: the metric keys the trials logged, the study's swept keys (params) and the
    longest evaluation length's perplexity (or accuracy) key, shown as a bar chart per trial."""

    metric_keys: list[str]
    swept_params: list[str]
    headline: str | None = None


def study_metrics(runs: list[tuple[set[str], dict[str, str]]]) -> StudyMetrics:
    """From the trial runs' metric keys and tags (`swept.<key>` names a swept key, logged as a param)."""
    keys = sorted(set().union(*(metric_keys for metric_keys, _ in runs))) if runs else []
    swept = sorted({tag.removeprefix(SWEPT) for _, tags in runs for tag in tags if tag.startswith(SWEPT)
                    and tag != f"{SWEPT}train.seed"})
    return StudyMetrics(keys, swept, headline_metric(keys))


def headline_metric(metric_keys: list[str]) -> str | None:
    """ppl_<longest L>, else che_acc_test: the one number per trial a study is usually read by."""
    lengths = [length for key in metric_keys if (length := names.length_of(key, names.PPL)) is not None]
    if lengths:
        return names.per_length(names.PPL, max(lengths))
    return names.CHE_ACC_TEST if names.CHE_ACC_TEST in metric_keys else None


def per_length(metric_keys: list[str]) -> list[str]:
    """The per-length metrics (ppl_<L>, else acc_<L>) by length: the view's table columns."""
    for prefix in (names.PPL, names.ACC):
        lengths = sorted(length for key in metric_keys if (length := names.length_of(key, prefix)) is not None)
        if lengths:
            return [names.per_length(prefix, length) for length in lengths]
    return []


def _line(uuid: str, metric: str, name: str, series: bool) -> dict:
    return {"uuid": uuid, "type": "LINE", "metricSectionId": SECTION, "isGenerated": False, "deleted": False,
            "displayName": name, "metricKey": metric, "runsCountToCompare": 100, "lineSmoothness": 0,
            "scaleType": "linear", "xAxisScaleType": "log" if series else "linear", "xAxisKey": "step",
            "selectedXAxisMetricKey": "", "yAxisKey": "metric", "yAxisExpressions": [], "ignoreOutliers": False,
            "useGlobalXaxisKey": False, "useGlobalLineSmoothing": False,
            "range": {"xMin": None, "xMax": None, "yMin": None, "yMax": None}}


def charts(metrics: StudyMetrics) -> list[dict]:
    """The view's chart cards: the by-length series and the training curves first, then the headline metric
    per trial and, where the study sweeps keys, their parallel coordinates; every other metric deleted."""
    present = set(metrics.metric_keys)
    cards = [_line(f"orchestrator-{key}", key, name, True) for key, name in SERIES.items() if key in present]
    cards += [_line(f"orchestrator-{key}", key, name, False) for key, name in CURVES.items() if key in present]
    shown = {card["metricKey"] for card in cards}
    if metrics.headline in present:
        cards.append({"uuid": "orchestrator-headline", "type": "BAR", "metricSectionId": SECTION,
                      "isGenerated": False, "deleted": False, "runsCountToCompare": 100,
                      "displayName": f"{metrics.headline} per trial", "metricKey": metrics.headline})
        shown.add(metrics.headline)
    if metrics.swept_params and metrics.headline in present:
        cards.append({"uuid": "orchestrator-parallel", "type": "PARALLEL", "metricSectionId": SECTION,
                      "isGenerated": False, "deleted": False, "runsCountToCompare": 100, "showAllRuns": True,
                      "displayName": "swept values against " + metrics.headline,
                      "selectedParams": list(metrics.swept_params), "selectedMetrics": [metrics.headline]})
    cards += [{"uuid": f"orchestrator-hidden-{key}", "type": "BAR", "metricSectionId": SECTION,
               "isGenerated": True, "deleted": True, "runsCountToCompare": 100, "metricKey": key}
              for key in sorted(present - shown)]
    return cards


def view_state(metrics: StudyMetrics) -> dict:
    """The saved view: trial runs as rows (the parent filtered out), every trial in the charts, the study's
    swept values and its per-length metrics (the headline one included) as table columns."""
    columns = [f"params.`{key}`" for key in metrics.swept_params] + ["attributes.`Dataset`"]
    columns += [f"metrics.`{key}`" for key in per_length(metrics.metric_keys)]  # the paper's table, per run
    if metrics.headline and f"metrics.`{metrics.headline}`" not in columns:
        columns.append(f"metrics.`{metrics.headline}`")
    order, ascending = ("tags.`mlflow.runName`", True)
    if metrics.headline:  # a leaderboard: best first (perplexity: lowest; accuracy: highest)
        order, ascending = f"metrics.`{metrics.headline}`", metrics.headline.startswith(names.PPL)
    return {
        "searchFilter": TRIAL_FILTER, "orderByKey": order, "orderByAsc": ascending,
        "startTime": "ALL", "lifecycleFilter": "Active", "datasetsFilter": [], "modelVersionFilter": "All Runs",
        "selectedColumns": columns, "columnOrder": [], "columnWidths": {}, "runsHiddenMode": "SHOW_ALL",
        "compareRunCharts": charts(metrics),
        "compareRunSections": [{"uuid": SECTION, "name": SECTION, "display": True, "isReordered": False}],
        "viewMaximized": False, "runListHidden": False, "isAccordionReordered": False, "groupBy": None,
        "groupsExpanded": {}, "useGroupedValuesInCharts": True, "hideEmptyCharts": True,
        "globalLineChartConfig": {"xAxisKey": "step", "lineSmoothness": 0, "selectedXAxisMetricKey": ""},
    }


def _packed(text: str) -> str:
    """The UI's own compressed form ("deflate;" + base64 of zlib data) when the plain JSON would come near
    MLflow's 20,000-character limit on an experiment tag (a study with very many metrics)."""
    if len(text) < 12_000:
        return text
    return "deflate;" + base64.b64encode(zlib.compress(text.encode(), 9)).decode("ascii")


def dashboard_tags(metrics: StudyMetrics, now_ms: int) -> dict[str, str]:
    """Experiment tags: the machine-learning kind and the saved view (both overwritten on each refresh)."""
    envelope = {"name": VIEW_NAME, "createdAt": now_ms, "updatedAt": now_ms,
                "state": _packed(json.dumps(view_state(metrics), separators=(",", ":")))}
    return {EXPERIMENT_KIND_TAG: TRAINING_KIND,
            f"{VIEW_TAG_PREFIX}{VIEW_KEY}": json.dumps(envelope, separators=(",", ":"))}


def run_page(base_url: str, experiment_id: str, run_id: str) -> str:
    """One run's page in the UI (its params, metrics, artifacts), in the machine-learning workflow: the web
    app takes the page's kind from the address's `workflowType`, else from a per-browser setting that defaults
    to GenAI, whose side bar (Evaluations, Judges, Prompts) is not a training run's."""
    query = urllib.parse.urlencode({"workflowType": WORKFLOW})
    return f"{base_url.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}?{query}"


def experiment_page(base_url: str, experiment_id: str) -> str:
    """The study's runs page with its saved view, in the machine-learning workflow."""
    query = urllib.parse.urlencode({"workflowType": WORKFLOW, "viewStateShareKey": VIEW_KEY})
    return f"{base_url.rstrip('/')}/#/experiments/{experiment_id}/runs?{query}"

"""Build a study's report from the MLflow store into reports/<study>/ and attach it to the study's parent run.

Files: report.md, report.html (self-contained), tables.tex (booktabs), results.csv (one row per trial),
table_<family>.csv (every number behind each table), plots/*.png.
"""

from __future__ import annotations

import json
import shutil
import time
from functools import cached_property
from pathlib import Path
from typing import Callable

import pandas as pd

import dape_core.metric_names as names

from ..folders import folder_lock
from ..judging.claims import ClaimResult, evaluate_claims, mlflow_record
from ..judging.diverged import masked
from ..run_context import RunContext
from ..study import Study
from ..study.code_identity import code_fingerprint
from ..study.metric_families import TIME
from ..tracking.store import StudyStore
from . import fingerprint, plots, render_html, render_latex, render_md, sweeps
from .cost_front import cost_front
from .document import ReportDocument
from .heat_maps import stored_heat_maps
from .protocol_note import protocol_note
from .published import published_lines, published_notes
from .results import ValueChoice, metric_history, study_results
from .search import SearchSection, search_section
from .tables import build_tables
from .timing_source import prefer_isolated, timing_note


class Report:
    """A report built or kept: its folder, report.md's text, the files written, the claims' verdicts and the
    summary the command line prints (render_md.summary), the study's trials (the results frame's). `document`,
    the report's whole content, is computed where a caller reads it: a report kept as it was (its inputs
    unchanged) has its summary on disk, and a finished study run again never computes its tables."""

    def __init__(self, folder: Path, markdown: str, files: list[Path], claims: list[ClaimResult], summary: str,
                 trials: pd.DataFrame, document: Callable[[], ReportDocument] | ReportDocument):
        self.folder, self.markdown, self.files, self.claims, self.summary = folder, markdown, files, claims, summary
        self.trials, self._document = trials, document

    @cached_property
    def document(self) -> ReportDocument:
        return self._document if isinstance(self._document, ReportDocument) else self._document()


def _distinct(frame: pd.DataFrame, column: str) -> str:
    """The values of a config column across the trials (every trial has its full config as columns)."""
    if column not in frame:
        return "?"
    return "/".join(str(v) for v in sorted({v for v in frame[column].dropna()}, key=str)) or "?"


def build_report(context: RunContext, reports_dir: Path, value: ValueChoice = ValueChoice(),
                 attach: bool = True, rebuild: bool = False, note: str = "") -> Report:
    """The report of the context's study from its store, over its rows (`orchestrator run`: the run's, so that
    the study is expanded once; `RunContext.of` a store: as the store holds them). Its `study_path`: the study
    file, where a search's report compares with its grid profile (search.py).
    `attach`: attach the files to the study's parent run and refresh its MLflow dashboard (tracking/
    dashboard.py); `orchestrator run` does, `orchestrator report` only with --attach (it then reads the store
    alone, and a SQLite store without loading MLflow). `rebuild`: even where the fingerprint says nothing changed
    (`orchestrator evaluate`: heat maps it drew are run artifacts, which the fingerprint does not read). `note`:
    what the report states first of the sequence its claims are judged as (`report --new-sequence`)."""
    # One process at a time writes a report folder: two orchestrators of one study end together (leased.py)
    # and each writes the whole report, but one's clearing plots/ must not pull the figures from under the
    # other's writing them. The lock is held until the report is attached.
    folder = Path(reports_dir) / context.study.name
    folder.mkdir(parents=True, exist_ok=True)
    with folder_lock(folder):
        return _build(context, folder, value, attach, rebuild, note)


def _build(context: RunContext, folder: Path, value: ValueChoice, attach: bool, rebuild: bool = False,
           note: str = "") -> Report:
    study, store, study_path = context.study, context.store, context.study_path
    frame = study_results(store, study, value, context.rows)
    trials, outside = frame[frame["in_study"]], frame[~frame["in_study"]]
    inputs = fingerprint.of_inputs(study, frame, value, code_fingerprint(study.plugin_payloads()).digest,
                                   f"{store.tracking_uri} (experiment {store.experiment_id})")
    kept = None if study.search.sampled or rebuild else fingerprint.unchanged(folder, inputs)
    if kept is not None:  # the same inputs, the same code: the report on disk is this report
        return _kept(context, folder, value, trials, outside, kept, attach)
    plot_dir = folder / "plots"
    if plot_dir.is_dir():
        shutil.rmtree(plot_dir)  # figures of a previous report may no longer apply
    fingerprint.forget(folder)  # until this report is whole
    search: SearchSection | None = None
    figures: list[plots.Plot] = []
    tabled = trials
    if study.search.sampled:
        history = metric_history(store, trials, study.search.primary_metric)
        search, figures = search_section(study, study_path, store, trials, history, plot_dir)
        tabled = trials[~trials["stopped_early"].astype(bool)]  # samples ASHA stopped never reached evaluation
    document = _document(context, value, trials, outside, tabled, plot_dir=plot_dir)
    if note:  # judged as a new sequence (report --new-sequence): said first, beside the design's note
        document.decide_note = " ".join(filter(None, (note, document.decide_note)))
    document.search = search
    document.plots = figures + _figures(study, document.tables, tabled, store, plot_dir)
    document.plots += stored_heat_maps(store, tabled, plot_dir)  # where eval.visualise / evaluate --visualise drew them
    markdown, summary = render_md.render(document), render_md.summary(document)
    files = _write(folder, {"report.md": markdown, "report.html": render_html.render(document),
                            "tables.tex": render_latex.render(document)}, frame, document.tables)
    files += [path for figure in document.plots for path in figure.files]
    files += document.cost.plot.files if document.cost is not None and document.cost.plot is not None else []
    if attach:
        _attach(store, folder, document.claims)
        _record_pareto(store, search)
    if search is None and not note:  # a report judged as a new sequence is never kept for a later one
        fingerprint.write(folder, inputs, document.plots, files, attached=attach, summary=summary)
    return Report(folder, markdown, files, document.claims, summary, trials, document)


def _decide_note(study: Study, store: StudyStore, trials: pd.DataFrame, claims: list[ClaimResult]) -> str:
    """A study run without `decide` whose claims are not all tested: what `run --decide` would add."""
    if not claims or all(getattr(claim, "decided", getattr(claim, "tested", False)) for claim in claims):
        return ""
    from ..planning.seeds_needed import decide_note

    return decide_note(study, store.reader, int((trials["status"] == "FINISHED").sum()))


def _design(study: Study, store: StudyStore):
    """The design the claims are judged by: the study's `decide:` section, else the one `run --decide` recorded
    on the study's run (so that the report gives the verdicts the loop reached: judging/design.py)."""
    if study.decide is not None:
        return None
    from ..judging.design import recorded

    return recorded(store, artifacts=False)[0]


def _sequence_note(study: Study, store: StudyStore) -> str:
    """Which design the claims were judged by, where a sequence of looks ran: a new sequence started with
    --new-sequence, or a design recorded on the study's run that its file does not state."""
    from ..judging.design import new_sequence_note, recorded, words

    design, source = recorded(store, artifacts=False)
    if design is None:
        return ""
    used = "the study's decide: section" if study.decide is not None else source
    return " ".join(part for part in (new_sequence_note(store),
                                      f"The claims are judged with {used}: {words(study.decide or design)}.") if part)


def _attach(store: StudyStore, folder: Path, claims: list[ClaimResult]) -> None:
    store.log_artifacts(folder)
    store.refresh_dashboard()  # the saved view `orchestrator ui` opens, with the charts of these metrics
    _record_claims(store, claims)


def _document(context: RunContext, value: ValueChoice, trials: pd.DataFrame, outside: pd.DataFrame,
              tabled: pd.DataFrame, figures: list | None = None, plot_dir: Path | None = None) -> ReportDocument:
    """The report's content but a search's section; `tabled`: the trials its tables are made of; `plot_dir`:
    where the cost front is drawn (None: computed, not drawn)."""
    study, store = context.study, context.store
    value_text = value.describe(_distinct(trials, "config.train.steps"))
    tail_text = (f" Here K = {_distinct(trials, 'config.eval.tail_tokens')} and the training length is "
                 f"{_distinct(trials, 'config.train.seq_len')}.")
    # The time table shows each trial's isolated timing (evaluate --time) where it has one (timing_source.py); the
    # claims read the logged columns themselves, so that a check never compares an isolated side with a contended one.
    tables = build_tables(prefer_isolated(tabled), value_text, tail_text, headline=study.report.metric)
    protocol = protocol_note(tabled)  # which text each length's column scored (docs/protocol.md)
    for table in tables:
        if table.family.declared is TIME:
            table.tail_text += timing_note(tabled)
        elif table.family.by_length:
            table.tail_text += protocol
    claims = _claims(context, trials)
    return ReportDocument(study_name=study.name, description=study.description, tracking_uri=store.tracking_uri,
                          experiment_id=store.experiment_id, value_text=value_text, trials=trials, outside=outside,
                          tables=tables, plots=figures or [], claims=claims,
                          decide_note=" ".join(filter(None, (_sequence_note(study, store),
                                                                     _decide_note(study, store, trials, claims)))),
                          best_points=sweeps.best_points(tables[0]) if tables and sweeps.sweep_axes(study) else None,
                          cost=cost_front(study, tables, tabled, plot_dir),
                          published=published_lines(study, prefer_isolated(tabled)),
                          current_code=code_fingerprint(study.plugin_payloads()).digest,
                          published_notes=published_notes(study))


def _claims(context: RunContext, trials: pd.DataFrame) -> list[ClaimResult]:
    return evaluate_claims(context.study, trials, context.study_path, _design(context.study, context.store))


def _kept(context: RunContext, folder: Path, value: ValueChoice, trials: pd.DataFrame, outside: pd.DataFrame,
          kept: fingerprint.Kept, attach: bool) -> Report:
    """The report of unchanged inputs: its files stay as they are (nothing is drawn or written), its summary
    is the one written with them; the claims are judged again (by the design the store records now), the rest
    of its content computed only where a caller reads it (`Report.document`). Attached once: again only when
    it was not yet."""
    claims = _claims(context, trials)
    if attach and not kept.attached:
        _attach(context.store, folder, claims)
        fingerprint.mark_attached(folder)
    return Report(folder, (folder / "report.md").read_text(encoding="utf-8"), kept.files, claims, kept.summary,
                  trials, lambda: _document(context, value, trials, outside, trials, kept.plots))


def _figures(study: Study, tables: list, trials: pd.DataFrame, store: StudyStore, plot_dir: Path) -> list:
    """Heat maps of a grid over 2+ axes (sweeps.py), metric vs length per by-length table, perplexity vs each
    swept value (while its lines stay readable), training curves."""
    finished = masked(trials[trials["status"] == "FINISHED"])  # a diverged value is not drawn (diverged.py)
    figures = []
    if tables and sweeps.sweep_axes(study):
        heatmaps = sweeps.heatmaps(study, tables[0], finished, plot_dir)
        figures += [heatmaps] if heatmaps else []
    for table in tables:
        if table.family.by_length:
            figures.append(plots.by_length(table, finished, plot_dir))
            figures[-1].caption += protocol_note(trials, plain=False)  # lines joining other text say so
        if table.family.key == "perplexity":
            drawn = [plots.versus_swept(key, table, finished, plot_dir) for key in plots.swept_keys(finished)]
            figures += [plot for plot in drawn if plot is not None]
    order = trials.sort_values("row_index").drop_duplicates("label")
    rows = [(row["label"], bool(row["baseline"]), row.get("block") or "", row.get("variant") or row["label"])
            for row in order.to_dict("records")]
    panels = set(plots.drawn_blocks([block for _, _, block, _ in rows]))  # the curves of panels not drawn: not read
    curves_of = finished[finished["block"].fillna("").isin(panels)] if "block" in finished else finished
    history = masked(metric_history(store, curves_of, names.TRAIN_LOSS), whole_rows=False)
    curves = plots.training_curves(history, rows, plot_dir)
    return figures + ([curves] if curves else [])


def _write(folder: Path, texts: dict[str, str], frame: pd.DataFrame, tables: list) -> list[Path]:
    files = []
    for name, text in texts.items():
        (folder / name).write_text(text, encoding="utf-8")
        files.append(folder / name)
    frame.to_csv(folder / "results.csv", index=False)
    files.append(folder / "results.csv")
    for table in tables:
        path = folder / f"table_{table.family.key}.csv"
        table.to_frame().to_csv(path, index=False)
        files.append(path)
    return files


def _record_pareto(store: StudyStore, search) -> None:
    """A multi-objective search's Pareto set in MLflow: on the parent run, tags search.pareto_size and
    search.pareto_runs (the runs' names, a JSON list); on each sample, the tag search.pareto = true or false (the
    MLflow UI filters on it: tags.`search.pareto` = 'true')."""
    if search is None or not search.multi_objective or not store.parent_run_id:
        return
    front = search.pareto if search.pareto is not None else pd.DataFrame(columns=["run_id", "run_name"])
    store.set_tags(store.parent_run_id, {"search.pareto_size": str(len(front)),
                                         "search.pareto_runs": json.dumps(list(front["run_name"].astype(str)))})
    on_front = set(front["run_id"])
    for run_id in search.samples["run_id"].dropna():  # every sample: a report of more samples may move the front
        store.set_tags(run_id, {"search.pareto": "true" if run_id in on_front else "false"})


def _record_claims(store: StudyStore, claims: list[ClaimResult]) -> None:
    """The verdicts on the parent run: tag claim.<id> = its words (holds, holds on 1 seed, untested, fails, ...),
    metrics claims_holding, claims_holding_untested, ... (claims.mlflow_record)"""
    if not claims or not store.parent_run_id:
        return
    tags, metrics = mlflow_record(claims)
    store.set_tags(store.parent_run_id, tags)
    store.log_metrics(store.parent_run_id, metrics, step=0, timestamp_ms=int(time.time() * 1000))

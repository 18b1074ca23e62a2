"""The report of a grid over two axes, trained for real (tiny trials, in-process): heat maps per variant and
the best grid point with its margin to the baseline there; figures as SVG beside PNG, the baseline named in
legends, axes named in words; an unchanged report is kept rather than rebuilt."""

import math
import re

import pytest

from orchestrator import parse_study
from orchestrator.reporting import build_report, load_results
from orchestrator.reporting.cells import number, signed
from orchestrator.reporting.fingerprint import FILE
from orchestrator.reporting.render_latex import _number
from orchestrator.run import run_and_report
from orchestrator.run_context import RunContext
from orchestrator.tracking.store import StudyStore

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SPEC = {
    "name": "two_axis_grid",
    "base": {"model": {"preset": "tiny", "pos_encoding": "kerple"}, "data": {"max_files": 100},
             "train": {"steps": 3, "batch_size": 4, "seq_len": 32, "log_every": 1},
             "eval": {"lengths": [32, 64], "tail_tokens": 16, "n_windows": 2}},
    "axes": {"model.d_dape": [4, 8], "train.lr": [0.001, 0.002]},
    "variants": [{"label": "Kerple", "baseline": True, "set": {"model.processor": "none"}},
                 {"label": "DAPE", "set": {"model.processor": "dapev2", "model.kernel_size": 3}}],
    "resources": {"cpus": 1, "max_retries": 0},
}


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    root = tmp_path_factory.mktemp("two_axis_grid")
    study = parse_study(SPEC)
    uri = f"sqlite:///{root / 'mlflow.db'}"
    outcome = run_and_report(RunContext.create(study, uri, storage_dir=root / "state", local=True), root / "reports")
    assert outcome.ok, outcome.failed
    assert outcome.trials_run == 6  # 8 rows: the baseline ignores d_dape, so it trains once per learning rate
    return study, uri, root / "reports" / study.name


@pytest.mark.slow
def test_heatmaps_and_the_best_grid_point(grid):
    study, uri, folder = grid
    assert (folder / "plots" / "perplexity_heatmaps.png").is_file()
    svg = (folder / "plots" / "perplexity_heatmaps.svg").read_text()
    assert "DAPE width" in svg and "learning rate" in svg and "Kerple (baseline)" in svg
    markdown = (folder / "report.md").read_text()
    section = markdown.split("## Best grid point per variant", 1)[1].split("##", 1)[0]
    lines = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[1:-1]]
             for line in section.splitlines() if line.startswith("| ") and "variant" not in line}
    assert set(lines) == {"Kerple", "DAPE"}
    frame = load_results(study, uri)
    dape = frame[frame["variant"] == "DAPE"]
    best = dape.loc[dape["ppl_64"].idxmin()]
    assert lines["DAPE"][1] == f"DAPE width {best['swept.model.d_dape']}, learning rate {best['swept.train.lr']:g}"
    assert lines["DAPE"][2] == f"{best['ppl_64']:.3f}"
    baseline = frame[(frame["label"] == best["compare_with"])]["ppl_64"].iloc[0]
    margin = (best["ppl_64"] / baseline - 1) * 100
    assert lines["DAPE"][5] == f"{signed(margin, 1)}%"
    assert "Best grid point per variant" in (folder / "tables.tex").read_text()


@pytest.mark.slow
def test_figures_have_vectors_words_and_a_named_baseline(grid):
    _, _, folder = grid
    for png in (folder / "plots").glob("*.png"):
        assert png.with_suffix(".svg").is_file(), png.name
    curves = (folder / "plots" / "perplexity_vs_length.svg").read_text()
    assert "Kerple (baseline)" in curves
    assert "DAPE width 4, learning rate 0.001" in curves  # a panel named in words
    assert "model.d_dape" not in curves and "d_dape=4" not in curves
    markdown = (folder / "report.md").read_text()
    assert "([SVG](plots/perplexity_vs_length.svg))" in markdown
    assert "[table_perplexity.csv](table_perplexity.csv)" in markdown  # what a capped figure points to


@pytest.mark.slow
def test_an_unchanged_report_is_kept_and_a_changed_one_rebuilt(grid, tmp_path):
    study, uri, folder = grid
    store = StudyStore.open(uri, study.name)
    build_report(RunContext.of(study, store), tmp_path, attach=False)
    written = {path: path.stat().st_mtime_ns for path in (tmp_path / study.name).rglob("*") if path.is_file()}
    assert (tmp_path / study.name / FILE) in written
    again = build_report(RunContext.of(study, store), tmp_path, attach=False)
    assert {path: path.stat().st_mtime_ns for path in written} == written  # nothing rewritten
    assert again.markdown == (tmp_path / study.name / "report.md").read_text()
    assert [plot.name for plot in again.document.plots] and again.document.tables
    changed = parse_study({**SPEC, "description": "another description"})
    rebuilt = build_report(RunContext.of(changed, store), tmp_path, attach=False)
    assert "another description" in rebuilt.markdown
    assert (tmp_path / study.name / "report.md").stat().st_mtime_ns != written[tmp_path / study.name / "report.md"]


def test_latex_rounds_like_markdown():
    assert _number(-0.0001, 3) == number(-0.0001, 3) == "0.000"
    assert _number(-0.0016, 3) == "-0.002"
    assert not math.isnan(float(_number(1.23456, 2)))
    assert re.fullmatch(r"1\.23", _number(1.23456, 2))


def test_saved_view_has_per_length_columns():
    from orchestrator.tracking.dashboard import StudyMetrics, view_state

    state = view_state(StudyMetrics(["ppl_128", "ppl_32", "ppl_64", "ppl_by_length", "train_loss"],
                                    ["model.kernel_size"], "ppl_128"))
    columns = state["selectedColumns"]
    assert columns[0] == "params.`model.kernel_size`"
    assert [c for c in columns if c.startswith("metrics.")] == [
        "metrics.`ppl_32`", "metrics.`ppl_64`", "metrics.`ppl_128`"]


def test_a_resumed_trial_says_from_which_step():
    import io

    from rich.console import Console

    from orchestrator import expand
    from orchestrator.tracking.console import ConsoleProgress
    from orchestrator.tracking.events import TrialEvents
    from orchestrator.trial.protocol import FINAL_FLAG

    trial = expand(parse_study(SPEC))[0]
    out = io.StringIO()
    events = TrialEvents([ConsoleProgress(1, Console(file=out, width=200), live=False)])
    events.started(trial)
    events.result(trial, {FINAL_FLAG: 1, "step": 3, "total_steps": 3, "resumed_from_step": 2, "ppl_32": 10.0})
    events.ended(trial)
    assert f"[1/1] {trial.run_name}: resumed from step 2" in out.getvalue()


# A grid of 3 variants x 3 widths x 3 learning rates (27 rows: capped small multiples, heat maps), its store
# written through the recorder with synthetic results (tests/synthetic_store.py): no training.
LAYOUT_SPEC = {
    **SPEC, "name": "layout_grid",
    "axes": {"model.d_dape": [4, 8, 16], "train.lr": [0.001, 0.002, 0.004]},
    "variants": [*SPEC["variants"], {"label": "DAPE V2 with a kernel of size 5 (wider)",
                                     "set": {"model.processor": "dapev2", "model.kernel_size": 5}}],
}


def _text_boxes(fig):
    """(owner axes, window extent) of every visible, non-empty text of a figure, and the figure's box."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)  # tick labels exist (and sit where they are drawn) once drawn
    axes = [ax for ax in fig.axes if ax.get_visible()]
    ticks = {id(label) for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)
             for tick in axis.majorTicks + axis.minorTicks for label in (tick.label1, tick.label2)}
    drawn = [label for ax in axes for axis in (ax.xaxis, ax.yaxis)  # the ticks in view, as Axis.draw picks them
             for tick in axis._update_ticks() for label in (tick.label1, tick.label2)]
    texts = [t for t in fig.findobj(Text) if id(t) not in ticks and (t.axes is None or t.axes.get_visible())]
    texts = [t for t in texts + drawn if t.get_visible() and t.get_text().strip()]
    return [(t.axes, t.get_window_extent(renderer), t.get_text()) for t in texts], fig.bbox, renderer


@pytest.mark.slow
def test_figures_are_laid_out_without_measuring_and_nothing_overlaps(tmp_path, monkeypatch):
    """The report's figures are laid out in inches before they are drawn (plots.Frame), not by tight_layout
    and a tight crop: the PNG is the figure's own size, and still every text lies inside it, no two texts
    overlap (titles, tick labels, axis names, legend entries, heat-map values) and no text covers another
    panel's plot area."""
    import synthetic_store

    from orchestrator.reporting import plots, sweeps

    study = parse_study(LAYOUT_SPEC)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    store = synthetic_store.write_store(study, uri)
    figures = {}
    original = plots._save

    def keep(fig, folder, name, tight=False):
        figures[name] = fig
        assert not tight  # the report's own figures are never cropped
        return original(fig, folder, name, tight)

    monkeypatch.setattr(plots, "_save", keep)
    monkeypatch.setattr(sweeps, "save_figure", keep)
    build_report(RunContext.of(study, store), tmp_path / "reports", attach=False)
    assert {"perplexity_heatmaps", "perplexity_vs_length", "delta_p_vs_length", "training_curves"} <= set(figures)
    from PIL import Image

    for name, fig in figures.items():
        width, height = fig.get_size_inches() * plots.DPI
        with Image.open(tmp_path / "reports" / study.name / "plots" / f"{name}.png") as png:
            assert abs(png.size[0] - width) <= 1 and abs(png.size[1] - height) <= 1, name  # not cropped
        boxes, figure_box, _ = _text_boxes(fig)
        for _, box, text in boxes:
            assert figure_box.x0 - 1 <= box.x0 and box.x1 <= figure_box.x1 + 1, (name, text)
            assert figure_box.y0 - 1 <= box.y0 and box.y1 <= figure_box.y1 + 1, (name, text)
        for i, (owner, box, text) in enumerate(boxes):
            for other_owner, other, other_text in boxes[i + 1:]:
                overlap = min(box.x1, other.x1) - max(box.x0, other.x0), min(box.y1, other.y1) - max(box.y0, other.y0)
                assert min(overlap) <= 1, (name, text, other_text)
            for ax in fig.axes:
                if ax is not owner and ax.get_visible():
                    area = ax.get_window_extent()
                    overlap = min(box.x1, area.x1) - max(box.x0, area.x0), min(box.y1, area.y1) - max(box.y0, area.y0)
                    assert min(overlap) <= 1, (name, text, "covers another panel")
    legends = [t.get_text() for fig in figures.values() for legend in fig.legends for t in legend.get_texts()]
    assert "DAPE width 4, kernel size 5, DAPE V2" in legends  # a line of perplexity_vs_train_lr, in words
    assert "DAPE width 4, no processor (baseline)" in legends  # the baseline's line there
    assert not [text for text in legends if "nan" in text or re.search(r"\d\.0\b", text)]  # no unset value, no "5.0"
    legend = figures["perplexity_vs_length"].legends[0]
    assert [t.get_text() for t in legend.get_texts()][0] == "Kerple (baseline)"
    report = (tmp_path / "reports" / study.name / "report.md").read_text()
    assert "Only the first 8 of the 9 grid points are drawn" in report


def _listing_document(tracking_uri: str):
    import pandas as pd

    from orchestrator.reporting.document import ReportDocument

    trials = pd.DataFrame({"label": ["Kerple", "DAPE"], "seed": [0, 0], "status": ["FINISHED", "SCHEDULED"],
                           "run_name": ["Kerple · s0", None], "run_id": ["0123456789abcdef0123456789abcdef", None],
                           "trial_id": ["aaaa", "bbbb"]})
    return ReportDocument(study_name="links", description="", tracking_uri=tracking_uri, experiment_id="7",
                          value_text="final value", trials=trials, outside=trials.iloc[:0])


@pytest.mark.parametrize("uri, address", [
    ("http://mlflow.example.org:8080", "http://mlflow.example.org:8080/#/experiments/7/runs/"),
    ("sqlite:////tmp/somewhere/mlflow.db", "http://127.0.0.1:5000/#/experiments/7/runs/"),
])
def test_run_ids_link_to_the_runs_page_in_the_mlflow_ui(uri, address):
    """In the trials table each run id links to its run's page in MLflow's UI: on a tracking server, or where
    `orchestrator ui` serves a SQLite store (the note says it must be running); a trial without a run has none."""
    from orchestrator.reporting import render_html, render_md

    document = _listing_document(uri)
    run_id = "0123456789abcdef0123456789abcdef"
    classic = "?workflowType=machine_learning"  # MLflow's classic run page, not its GenAI view (dashboard.run_page)
    html = render_html.render(document)
    assert f'<a href="{address}{run_id}{classic}">{run_id}</a>' in html
    assert html.count("<a href=\"http") == 1  # the trial that has no run has no link
    markdown = render_md.render(document)
    assert f"[{run_id}]({address}{run_id}{classic})" in markdown
    server = uri.startswith("http")
    assert ("orchestrator ui STUDY" in markdown) is not server
    assert ("<code>orchestrator ui STUDY</code>" in html) is not server
    assert ("tracking server" in markdown) is server


def test_no_run_links_for_a_store_the_ui_does_not_serve():
    from orchestrator.reporting import render_html, render_md

    document = _listing_document("file:///tmp/somewhere/mlruns")
    assert "0123456789abcdef0123456789abcdef" in render_md.render(document)
    assert "<a href=\"http" not in render_html.render(document) and "Run ids link" not in render_md.render(document)

"""The papers' numbers beside ours: a study's `published:` values for a profile appear in that profile's report
beside the measured cells, with the difference; the file as written (the CPU default) shows none; a value
naming a row, metric or length the profile does not have is refused with its field path."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import synthetic_store

from orchestrator import StudyError, load_study, parse_study
from orchestrator.reporting import build_report
from orchestrator.run_context import RunContext

SPEC = {
    "name": "published_values",
    "base": {"model": {"preset": "tiny", "pos_encoding": "nope"},
             "train": {"steps": 20, "batch_size": 4, "seq_len": 16},
             "eval": {"lengths": [16, 32], "tail_tokens": 8, "n_windows": 2}},
    "axes": {"model.pos_encoding": ["nope", "rope"]},
    "variants": [{"label": "plain", "baseline": True, "set": {"model.processor": "none"}},
                 {"label": "DAPE1x3", "set": {"model.processor": "dapev2", "model.kernel_size": 3}}],
    "seeds": [0, 1],
    # The `paper` profile's setting: longer evaluation (still tiny, so that a synthetic store writes quickly).
    "profiles": {"paper": {"base.eval.lengths": [16, 32, 64]}},
    "published": {"paper": [
        {"variant": "plain", "where": {"model.pos_encoding": "nope"}, "metric": "ppl", "length": 64,
         "value": 2618.13, "location": {"paper": "DAPE V2", "table": "rebuttal, kernel-size table", "row": "DAPE-NoPE",
                                        "setting": "Arxiv, training length 512", "column": "8192"}},
        {"variant": "DAPE1x3", "where": {"model.pos_encoding": "nope"}, "metric": "ppl", "length": 64,
         "value": 259.81, "location": {"paper": "DAPE V2", "table": "rebuttal, kernel-size table",
                                       "row": "DAPE1x3-NoPE", "setting": "Arxiv, training length 512",
                                       "column": "8192"}},
        {"variant": "DAPE1x3 (pos_encoding=rope)", "metric": "ms_per_step", "value": 252.84,
         "location": {"paper": "DAPE V2", "table": "§4.9", "row": "DAPE1x3-Kerple", "setting": "350M",
                      "column": "350M"}, "note": "what was timed is not stated"}]},
}


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("published")
    paper = parse_study(copy.deepcopy(SPEC), profile="paper")
    default = parse_study(copy.deepcopy(SPEC))
    store = synthetic_store.write_store(paper, f"sqlite:///{root / 'paper.db'}")
    plain = synthetic_store.write_store(default, f"sqlite:///{root / 'default.db'}")
    return (build_report(RunContext.of(paper, store), root / "paper", attach=False),
            build_report(RunContext.of(default, plain), root / "default", attach=False))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_papers_values_stand_beside_the_measured_cells_at_the_paper_profile(stores):
    report, _ = stores
    trials = report.document.trials
    lines = {(line.label, line.metric): line for line in report.document.published}
    assert set(lines) == {("plain (pos_encoding=nope)", "ppl_64"), ("DAPE1x3 (pos_encoding=nope)", "ppl_64"),
                          ("DAPE1x3 (pos_encoding=rope)", "ms_per_step")}
    section = report.markdown.split("## Published values beside ours")[1].split("\n## ")[0]
    for (label, column), line in lines.items():
        measured = trials.loc[(trials["label"] == label) & (trials["status"] == "FINISHED"), column]
        assert len(measured) == 2 and line.seeds == 2
        assert line.mean == pytest.approx(measured.mean())
        assert line.difference == pytest.approx(measured.mean() - line.published)
        row = next(text for text in section.splitlines() if text.startswith(f"| {label}") and
                   (column == "ms_per_step") == ("ms_per_step" in text))
        assert f"{line.published:g}" in row and f"{line.difference:+.3f}" in row
        assert line.paper_row in row and line.location in row  # the paper's name and where it gives it, beside it
    rows = {line.label: line for line in report.document.published}
    assert rows["plain (pos_encoding=nope)"].paper_row == "DAPE-NoPE (Arxiv, training length 512)"
    assert "(what was timed is not stated)" in next(text for text in section.splitlines() if "ms_per_step" in text)
    assert 'id="published-values"' in (report.folder / "report.html").read_text()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_cpu_default_shows_no_published_value(stores):
    _, default = stores
    assert default.document.published == []
    assert "Published values" not in default.markdown


@pytest.mark.parametrize("entry, field", [
    ({"variant": "DAPE9x9"}, "published.paper[0].variant"),
    ({"where": {"model.pos_encoding": "alibi"}}, "published.paper[0].where"),
    ({"metric": "perplexity"}, "published.paper[0].metric"),
    ({"length": 8192}, "published.paper[0].length"),
    ({"length": None}, "published.paper[0].length"),
])
def test_a_value_the_profile_cannot_measure_is_refused_with_its_field(entry, field, tmp_path):
    spec = copy.deepcopy(SPEC)
    spec["published"]["paper"][0].update(entry)
    for profile in ("paper", None):  # chosen, or checked as one of the file's profiles
        with pytest.raises(StudyError) as error:
            parse_study(copy.deepcopy(spec), profile=profile)
        assert field in str(error.value)


def test_published_values_belong_to_a_profile():
    spec = copy.deepcopy(SPEC)
    spec["published"] = {"papr": spec["published"]["paper"]}
    with pytest.raises(StudyError, match=r"published: 'papr' is not a profile"):
        parse_study(spec)


@pytest.mark.parametrize("field", ["location", "location.row", "location.table", "location.column"])
def test_a_value_without_its_place_in_the_paper_is_refused(field):
    """A number a reader cannot find in the paper is not shown: its location (and each part of it) is required."""
    spec = copy.deepcopy(SPEC)
    entry = spec["published"]["paper"][0]
    if "." in field:
        del entry["location"][field.split(".")[1]]
    else:
        del entry["location"]
    with pytest.raises(StudyError) as error:
        parse_study(spec)
    assert f"published.paper.0.{field}: Field required" in str(error.value)


def test_unpublished_says_why_a_profile_has_none_and_belongs_to_a_profile():
    spec = copy.deepcopy(SPEC)
    spec["published"] = {}
    spec["unpublished"] = {"paper": "the paper gives this setting as a figure"}
    study = parse_study(copy.deepcopy(spec), profile="paper")
    assert study.unpublished_here() == "the paper gives this setting as a figure"
    assert parse_study(copy.deepcopy(spec)).unpublished_here() is None
    from orchestrator.reporting.published import published_notes

    notes = published_notes(study)
    assert notes[0] == "No published value: the paper gives this setting as a figure"
    # its rows score the last 8 tokens, not the papers' 256: the report says so, and with how many rows
    assert "the last 8 tokens at training length 16 (4 row(s))" in notes[1]
    spec["unpublished"] = {"papr": "x"}
    with pytest.raises(StudyError, match=r"unpublished: 'papr' is not a profile"):
        parse_study(spec)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_catalogue_paper_profile_shows_the_papers_values(tmp_path):
    """studies/position_encoding.yaml at its `paper` profile (a synthetic store of its 24 rows: no training, no
    corpus needed to report): DAPE V2's numbers at 8192 beside the cells of those rows: 2618.13 and 306.78 are
    the original DAPE's (DAPE-NoPE, DAPE-RoPE), on the DAPE rows, under the paper's own names."""
    path = Path(__file__).resolve().parents[1] / "studies" / "position_encoding.yaml"
    study = load_study(path, profile="paper")
    store = synthetic_store.write_store(study, f"sqlite:///{tmp_path / 'mlflow.db'}")
    report = build_report(RunContext.of(study, store), tmp_path / "reports", attach=False)
    published = {(line.label, line.published) for line in report.document.published}
    assert published == {("DAPE (pos_encoding=nope)", 2618.13), ("DAPE1x3 (pos_encoding=nope)", 259.81),
                         ("DAPE (pos_encoding=rope)", 306.78), ("DAPE1x3 (pos_encoding=rope)", 68.32)}
    assert all(line.metric == "ppl_8192" and line.seeds == 1 for line in report.document.published)
    assert "DAPE-NoPE (Arxiv, training length 512" in report.markdown and "rebuttal to Reviewer UyHR" in report.markdown
    assert load_study(path).published_here() == []  # the CPU default: none applies


def test_a_diverged_seed_is_named_beside_the_papers_value_not_averaged():
    """A seed whose perplexity diverged (+inf, or the 1.797e308 MLflow's SQLite keeps for it) is not averaged
    into the cell set beside the paper's number: the line says how many seeds diverged and gives no difference."""
    import numpy as np
    import pandas as pd

    from orchestrator.reporting.published import published_lines

    study = parse_study(copy.deepcopy(SPEC), profile="paper")
    label = "plain (pos_encoding=nope)"
    frame = pd.DataFrame([{"label": label, "seed": seed, "status": "FINISHED", "ppl_64": value}
                          for seed, value in ((0, 2500.0), (1, 1.7976931348623157e308))])
    (line,) = [line for line in published_lines(study, frame) if line.label == label]
    assert line.diverged == 1 and line.seeds == 2 and np.isnan(line.mean)
    texts = line.texts()
    assert texts[5] == "diverged (1 of 2 seeds)" and texts[6] == "–"
    finite = frame.assign(ppl_64=[2500.0, 2700.0])
    (line,) = [line for line in published_lines(study, finite) if line.label == label]
    assert line.diverged == 0 and line.mean == 2600.0

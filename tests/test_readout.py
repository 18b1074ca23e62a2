"""The report's readout, without a store: the setup block names a setting that differs by row with its rows
and the device once; a column that is 0 by definition is left out with its reason; length plots mark the
training length on a log2 axis with the lengths as ticks; training curves get about five step ticks; a run's
per-length results as the table MLflow's UI shows; run links open MLflow's classic (machine-learning) pages."""

from __future__ import annotations

import re

import pandas as pd

from orchestrator.reporting import plots
from orchestrator.reporting.families import FAMILIES
from orchestrator.reporting.setup import setup_summary
from orchestrator.reporting.tables import build_table
from orchestrator.tracking import dashboard
from orchestrator.tracking.run_files import length_table

LENGTHS = [64, 128, 256, 512]


def _trials() -> pd.DataFrame:
    """Kernel_size's shape: Kerple alone (the baseline) and four DAPE V2 rows, two seeds each."""
    rows = []
    for index, (label, processor) in enumerate([("Kerple", "none"), ("DAPE-Kerple", "dapev2"),
                                                ("DAPE1x3-Kerple", "dapev2"), ("DAPE1x5-Kerple", "dapev2"),
                                                ("DAPE1x7-Kerple", "dapev2")]):
        for seed in (0, 1):
            ppl = {f"ppl_{length}": 30.0 + index + seed + length / 64 for length in LENGTHS}
            rows.append({"label": label, "seed": seed, "status": "FINISHED", "row_index": index,
                         "baseline": index == 0, "config.model.preset": "small", "config.model.pos_encoding": "kerple",
                         "config.model.processor": processor, "config.train.seq_len": 64, "config.train.steps": 500,
                         "config.train.batch_size": 16, "device": "cpu", "precision": "fp32",
                         "env.device": "cpu", "env.device_model": "Test CPU", "env.cpu_count": "2", **ppl,
                         **{f"delta_p_{length}": ppl["ppl_64"] - ppl[f"ppl_{length}"] for length in LENGTHS}})
    return pd.DataFrame(rows)


def test_setup_names_a_setting_that_differs_by_row_and_the_device_once():
    facts = dict(setup_summary(_trials()))
    assert "score processor by row: DAPE V2 (4 rows), no processor (1 row)" in facts["model"]
    assert "position encoding Kerple;" in facts["model"]  # one value: no "by row"
    assert facts["device"] == "cpu: Test CPU (2 CPU cores on the machine); precision fp32"
    assert list(facts).count("device") == 1


def test_a_column_zero_by_definition_is_left_out_with_its_reason():
    family = next(family for family in FAMILIES if family.key == "delta_p")
    table = build_table(family, _trials(), "final value")
    assert table.left_out == ["delta_p_64"] and [table.header(c) for c in table.columns] == ["L=128", "L=256", "L=512"]
    assert "L=64 left out: ΔP is 0 there by definition" in table.caption()
    perplexity = build_table(next(f for f in FAMILIES if f.key == "perplexity"), _trials(), "final value")
    assert perplexity.left_out == [] and len(perplexity.columns) == 4  # no reason declared: every column shown


def test_length_plots_mark_the_training_length_and_use_the_lengths_as_ticks(tmp_path):
    trials = _trials()
    table = build_table(next(f for f in FAMILIES if f.key == "perplexity"), trials, "final value")
    plot = plots.by_length(table, trials, tmp_path)
    assert "training length (64)" in plot.caption and "log2" in plot.caption
    svg = plot.vector.read_text()  # text stays text in the SVG (svg.fonttype none)
    assert "train L=64" in svg
    ticks = re.findall(r">(\d+)</text>", svg)
    assert [t for t in ticks if int(t) in LENGTHS] == [str(length) for length in LENGTHS]
    # ΔP leaves out its column at the training length; the axis still shows where that length is.
    gains = build_table(next(f for f in FAMILIES if f.key == "delta_p"), trials, "final value")
    svg = plots.by_length(gains, trials, tmp_path).vector.read_text()
    assert [t for t in re.findall(r">(\d+)</text>", svg) if int(t) in LENGTHS] == [str(length) for length in LENGTHS]


def test_training_curves_have_about_five_step_ticks(tmp_path):
    history = pd.DataFrame([{"label": label, "seed": 0, "step": step, "value": 5.0 - step / 200}
                            for label in ("Kerple", "DAPE-Kerple") for step in range(50, 501, 50)])
    plot = plots.training_curves(history, [("Kerple", True, "", "Kerple"), ("DAPE-Kerple", False, "", "DAPE-Kerple")],
                                 tmp_path)
    fig_text = plot.vector.read_text()
    steps = sorted({int(t) for t in re.findall(r">(\d+)</text>", fig_text) if int(t) % 50 == 0 and int(t) >= 50})
    assert 4 <= len(steps) <= 7, steps


def test_a_runs_results_by_length_are_one_table():
    metrics = {"ppl_64": 30.0, "ppl_1024": 61.5, "delta_p_1024": 2.5, "train_loss": 3.1, "ms_forward_64": 0.5}
    table = length_table(metrics)
    assert table == {"columns": ["length", "ppl", "delta_p", "ms_forward"],
                     "data": [[64, 30.0, None, 0.5], [1024, 61.5, 2.5, None]]}
    assert length_table({"train_loss": 3.1}) is None


def test_run_links_open_the_classic_run_page():
    link = dashboard.run_page("http://127.0.0.1:5000/", "3", "ab" * 16)
    assert link == f"http://127.0.0.1:5000/#/experiments/3/runs/{'ab' * 16}?workflowType=machine_learning"

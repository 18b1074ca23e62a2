"""The report's cost front: quality at the longest length against cost, one point per row with its seed
spread, the Pareto front marked and tabled. The front of a synthetic store (tests/synthetic_store.py: the
orchestrator's own tracking code, synthetic results) is exactly the set of rows no other row dominates, by a
brute-force check written apart from the code under test; the front itself is checked on random points."""

from __future__ import annotations

import random

import pytest
import synthetic_store

from orchestrator import parse_study
from orchestrator.reporting import build_report
from orchestrator.reporting.pareto import pareto_mask
from orchestrator.run_context import RunContext

SPEC = {
    "name": "cost_front",
    "base": {"model": {"preset": "tiny", "pos_encoding": "kerple"},
             "train": {"steps": 20, "batch_size": 4, "seq_len": 32},
             "eval": {"lengths": [32, 64, 128], "tail_tokens": 16, "n_windows": 2}},
    "variants": [{"label": "Kerple", "baseline": True, "set": {"model.processor": "none"}}]
    + [{"label": f"DAPE1x{k}-D{d}", "set": {"model.processor": "dapev2", "model.kernel_size": k, "model.d_dape": d}}
       for k in (1, 3, 5) for d in (4, 8, 16)],
    "seeds": [0, 1, 2],
}


def _brute_force(points: dict[str, tuple[float, float]]) -> set[str]:
    """Rows no other row beats: another at most as costly and at most as perplexed, strictly less in one."""
    return {label for label, (quality, cost) in points.items()
            if not any(q <= quality and c <= cost and (q < quality or c < cost)
                       for other, (q, c) in points.items() if other != label)}


def test_the_front_of_random_points_is_the_non_dominated_set():
    generator = random.Random(7)
    for _ in range(200):
        count = generator.randint(1, 25)
        points = {str(i): (generator.choice([generator.random(), 0.5]), generator.choice([generator.random(), 0.25]))
                  for i in range(count)}  # repeated coordinates: ties in one objective, equal points
        mask = pareto_mask(list(points.values()), ["min", "min"])
        assert {label for label, on in zip(points, mask) if on} == _brute_force(points)
        flipped = pareto_mask([(-q, c) for q, c in points.values()], ["max", "min"])
        assert flipped == mask  # maximising the negated quality is minimising it


def test_nan_is_never_on_the_front():
    assert pareto_mask([(1.0, float("nan")), (2.0, 2.0)], ["min", "min"]) == [False, True]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("cost_front")
    study = parse_study(SPEC)
    store = synthetic_store.write_store(study, f"sqlite:///{root / 'mlflow.db'}")
    return build_report(RunContext.of(study, store), root / "reports", attach=False)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_front_of_a_synthetic_store_is_its_non_dominated_rows(report):
    trials = report.document.trials
    finished = trials[trials["status"] == "FINISHED"]
    means = finished.groupby("label")[["ppl_128", "ms_per_step"]].mean()
    points = {label: (row["ppl_128"], row["ms_per_step"]) for label, row in means.iterrows()}
    front = report.document.cost
    assert front is not None and front.quality_column == "ppl_128" and front.cost_name.startswith("ms per step")
    assert {point.label for point in front.front} == _brute_force(points)
    assert 1 <= len(front.front) < len(points)  # a real trade: some rows are dominated
    for point in front.points:  # one point per row, with its seeds' spread
        assert point.seeds == 3 and point.quality_std > 0 and point.cost_std > 0
        assert point.quality == pytest.approx(points[point.label][0])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_report_shows_the_front_drawn_and_tabled(report):
    markdown = report.markdown
    assert "## Cost and quality" in markdown
    section = markdown.split("## Cost and quality")[1].split("\n## ")[0]
    for point in report.document.cost.front:
        assert point.label in section
    dominated = [point.label for point in report.document.cost.points if not point.on_front]
    table = section.split("cheapest first:")[1]
    assert not any(f"| {label} " in table for label in dominated)
    assert (report.folder / "plots" / "cost_front.png").is_file()
    assert (report.folder / "plots" / "cost_front.svg").is_file()
    assert 'id="cost-front"' in (report.folder / "report.html").read_text()
    assert markdown.index("## Cost and quality") > markdown.index("## Perplexity by evaluation length")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_without_timings_the_plan_flops_stand_for_the_cost(report):
    from orchestrator.reporting.cost_front import GFLOPS, cost_front

    study = parse_study(SPEC)
    trials = report.document.trials.drop(columns=["ms_per_step"])
    front = cost_front(study, report.document.tables, trials, None)
    assert front.cost_name == GFLOPS
    costs = {point.label: point.cost for point in front.points}
    assert costs["DAPE1x5-D16"] > costs["DAPE1x1-D4"] > costs["Kerple"] > 0  # the processor's cost grows with k, D

"""One notion of a sampled versus a grid study: `Search.sampled` (study/model.py). No other module compares
search.algorithm with "grid" itself."""

from __future__ import annotations

import re
from pathlib import Path

from orchestrator.study.model import Search

ROOT = Path(__file__).resolve().parent.parent
# Modules still testing the algorithm by name, each with why: remove the entry when the module reads `sampled`.
ALLOWED = {"orchestrator/evaluation/runner.py": "owned by the evaluation protocol's work at the time of the move"}
GRID_TEST = re.compile(r"""algorithm\s*[!=]=\s*["']grid["']|["']grid["']\s*[!=]=\s*\S*algorithm""")


def test_sampled_and_samples_per_row():
    grid = Search(num_samples=5)
    assert not grid.sampled and grid.samples_per_row == 1
    space = {"train.lr": {"type": "loguniform", "low": 1e-4, "high": 1e-2}}
    for algorithm in ("random", "optuna"):
        sampled = Search(algorithm=algorithm, num_samples=5, space=space)
        assert sampled.sampled and sampled.samples_per_row == 5


def test_no_module_tests_grid_by_name():
    found = sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "orchestrator").rglob("*.py")
                   if GRID_TEST.search(path.read_text()))
    assert [name for name in found if name not in ALLOWED] == []
    assert set(ALLOWED) <= set(found), "stale ALLOWED entries: the module no longer tests the algorithm by name"
    assert GRID_TEST.search('if study.search.algorithm != "grid":') and GRID_TEST.search("'grid' == s.algorithm")

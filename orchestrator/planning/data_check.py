"""Is the data every trial will read there, and does it match what the study says? Checked on the driver
before anything is launched, in milliseconds (no corpus is read), so that a missing or mismatched corpus is
one clear error (exit code 2) instead of every trial failing after Ray has started.

Relative data paths are relative to the folder `orchestrator run` was started in (`launch_dir`): the
trainable anchors them there too, since each Ray Tune trial runs in a folder of its own.
"""

from __future__ import annotations

import json
from pathlib import Path

from dape_core.data import DataConfig, anchored, data_problems

from .trials import Trial

PREPARE_HINT = ("prepare it with `orchestrator data prepare CORPUS --output {folder}` (README: \"From a corpus to a "
                "paper-profile run\")")


class DataNotReady(ValueError):
    """The study's data cannot be read as the study describes it; `problems` has one line each."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        lines = "\n".join(f"  - {problem}" for problem in problems)
        super().__init__(f"the study's data is not ready ({len(problems)} problem(s)); no trial was launched:\n{lines}")


def _data_sections(trials: list[Trial]) -> list[dict]:
    """The distinct `data:` sections of the language-model trials (CHE trials read no corpus)."""
    seen: dict[str, dict] = {}
    for trial in trials:
        if trial.config.get("che") is None and "data" in trial.config:
            seen.setdefault(json.dumps(trial.config["data"], sort_keys=True), trial.config["data"])
    return list(seen.values())


def check_data(trials: list[Trial], launch_dir: Path) -> None:
    problems: list[str] = []
    for section in _data_sections(trials):
        data = anchored(DataConfig(**section), launch_dir)
        found = data_problems(data)
        if found and data.source == "tokens" and found[0].startswith("data.path: no token file"):
            found[0] += "; " + PREPARE_HINT.format(folder=Path(section["path"]).parent)
        problems.extend(problem for problem in found if problem not in problems)
    if problems:
        raise DataNotReady(problems)

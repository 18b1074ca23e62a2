"""The learned position patterns (the heat maps `eval.visualise` or `orchestrator evaluate --visualise` draws
into a trial run's `attention/` artifacts: query × key maps per head, dape_core/evaluate/visualise.py) shown in
the report: each finished trial's last layer, copied into
the report's plots/. Only a store whose artifacts are local files (the embedded SQLite default) is read, in
place and without MLflow; a remote store's heat maps stay in the runs (the MLflow UI shows them)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

import pandas as pd

from ..tracking.store import StudyStore
from .plots import Plot

_LAYER = re.compile(r"^attention_layer(\d+)\.png$")


def stored_heat_maps(store: StudyStore, trials: pd.DataFrame, plot_dir: Path) -> list[Plot]:
    finished = trials[trials["status"] == "FINISHED"].sort_values(["row_index", "seed"])
    wanted = {run_id: label for run_id, label in zip(finished["run_id"], finished["label"]) if isinstance(run_id, str)}
    if not wanted:
        return []
    plots = []
    for run in store.trial_runs():
        label = wanted.get(run.info.run_id)
        folder = _local(run.info.artifact_uri or "")
        if label is None or folder is None or not (folder / "attention").is_dir():
            continue
        layers = sorted((int(m.group(1)), path) for path in (folder / "attention").iterdir()
                        if (m := _LAYER.match(path.name)))
        if not layers:
            continue
        layer, source = layers[-1]
        plot_dir.mkdir(parents=True, exist_ok=True)
        name = f"attention_{run.info.run_id[:8]}"
        target = plot_dir / f"{name}.png"
        shutil.copyfile(source, target)
        plots.append(Plot(name, f"Learned position pattern: {run.info.run_name}, layer {layer}",
                          f"Processed attention logits of every query against every key (one panel per head) on "
                          f"the first tokens of the held-out text, layer {layer} of {run.info.run_name}; the title "
                          "names the encoding, processor, kernel, training and evaluation length (every layer and "
                          "the arrays: the run's attention/ artifacts).",
                          target))
    return plots


def _local(artifact_uri: str) -> Path | None:
    parsed = urlparse(artifact_uri)
    return Path(unquote(parsed.path)) if parsed.scheme in ("", "file") and artifact_uri else None

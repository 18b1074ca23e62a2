"""Everything one report shows, gathered once and handed to each renderer (Markdown, HTML, LaTeX)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

import dape_core.metric_names as names

from .plots import Plot
from .results import MISSING
from .setup import code_marks, setup_summary
from .tables import Table

if TYPE_CHECKING:
    from .cost_front import CostFront
    from .published import PublishedLine
    from .search import SearchSection
    from .sweeps import BestPoints

_REASONS = {
    MISSING: "no run in the tracking store",
    "KILLED": "interrupted (the orchestrator stopped before the trial finished)",
    "RUNNING": "still running, or its orchestrator was killed",
    "SCHEDULED": "scheduled, not started",
    "FAILED": "failed",
}


@dataclass
class ReportDocument:
    study_name: str
    description: str
    tracking_uri: str
    experiment_id: str
    value_text: str
    trials: pd.DataFrame  # every in-study trial, any status
    outside: pd.DataFrame  # runs of the experiment the study file does not define
    tables: list[Table] = field(default_factory=list)
    plots: list[Plot] = field(default_factory=list)
    search: "SearchSection | None" = None  # a sampling search's own section (search.py)
    claims: list[Any] = field(default_factory=list)  # claims.ClaimResult: the study's expect: section, judged
    decide_note: str = ""  # what `run --decide` would add (planning/seeds_needed.py), for a study run without it
    best_points: "BestPoints | None" = None  # a grid over 2+ axes: each variant's best grid point (sweeps.py)
    cost: "CostFront | None" = None  # quality against cost with the Pareto front (cost_front.py)
    published: "list[PublishedLine]" = field(default_factory=list)  # the papers' values beside ours (published.py)
    current_code: str = ""  # the code fingerprint of the checkout that builds the report (study/code_identity.py)
    published_notes: list[str] = field(default_factory=list)  # why none, a shorter tail than the papers' (published.py)
    _facts: dict = field(default_factory=dict, repr=False, compare=False)  # setup and provenance, read once

    def unfinished(self) -> list[str]:
        """"Label · sN: STATUS: reason" for every trial that has no finished run."""
        lines = []
        for _, trial in self.trials[self.trials["status"] != "FINISHED"].iterrows():
            reason = trial.get("error") if isinstance(trial.get("error"), str) else _REASONS.get(trial["status"], "")
            lines.append(f"{trial['label']} · s{trial['seed']}: {trial['status']}" + (f": {reason}" if reason else ""))
        return lines

    def numbered_tables(self, section: str) -> list[tuple[int, Table]]:
        """The tables a section shows, each with its number: "headline", Table 1 (the headline family's);
        "tables", the others (Table 2 on)."""
        return list(enumerate(self.tables[:1], start=1) if section == "headline" else enumerate(self.tables[1:], 2))

    def no_tables_text(self) -> str:
        if self.search is not None and self.trials.empty:
            return "No sample has run yet."
        if (self.trials["status"] == "FINISHED").any():
            return f"No metric of the finished trials has a value to show ({self.value_text})."
        return "No finished trials yet."

    def outside_lines(self) -> list[str]:
        return [f"{run['run_name']} ({run['status']}, trial {run['trial_id']})" for _, run in self.outside.iterrows()]

    def counts(self) -> str:
        statuses = self.trials["status"].value_counts()
        parts = [f"{int(statuses.get('FINISHED', 0))} finished"]
        if self.search is not None and "stopped_early" in self.trials:
            stopped = int((self.trials["stopped_early"].astype(bool) & (self.trials["status"] == "FINISHED")).sum())
            parts = [f"{int(statuses.get('FINISHED', 0)) - stopped} trained to the end",
                     f"{stopped} stopped early by ASHA"]
        parts += [f"{int(n)} {status.lower()}" for status, n in statuses.items() if status != "FINISHED"]
        what = "sample(s)" if self.search is not None else "trial(s)"
        shared = int(self.trials["shared_with"].notna().sum()) if "shared_with" in self.trials else 0
        if shared:  # rows that differ only in settings their trial does not read read one run
            parts.append(f"{shared} of them read another row's run (the trial does not read what they differ in)")
        return f"{len(self.trials)} {what}: " + ", ".join(parts)

    def provenance(self) -> list[tuple[str, str]]:
        """Study-wide facts a reader needs to trust the numbers: code, data, hardware, software (provenance.py)."""
        from .provenance import provenance

        if "provenance" not in self._facts:  # asked by the outline (whether to show it) and by each format
            self._facts["provenance"] = provenance(self.trials)
        return self._facts["provenance"]

    def setup(self) -> list[tuple[str, str]]:
        """The setup summary at the report's top (setup.py)."""
        if "setup" not in self._facts:
            self._facts["setup"] = setup_summary(self.trials, self.current_code, self.study_name)
        return self._facts["setup"]

    def run_links(self) -> tuple[list[str | None], str]:
        """Per trial (trial_listing's rows), the address of its run's page in MLflow's UI (None without a
        run, or for a store the UI does not serve), and what the trials table says about the links."""
        from ..tracking import ui
        from ..tracking.uri import is_server

        ids = self.trials["run_id"] if "run_id" in self.trials else pd.Series([None] * len(self.trials))
        links = [ui.run_url(self.tracking_uri, self.experiment_id, run_id) if isinstance(run_id, str) and run_id
                 else None for run_id in ids]
        if not any(links):
            return links, ""
        if is_server(self.tracking_uri):
            return links, f"Run ids link to each run's page on the tracking server {self.tracking_uri}."
        return links, (f"Run ids link to each run's page in MLflow's UI at {ui.local_address()}, which "
                       f"`orchestrator ui STUDY` serves (STUDY: this study's file, or its name in studies/): the "
                       "links open while it runs.")

    def trial_listing(self) -> pd.DataFrame:
        columns = {"label": "variant", "seed": "seed", "status": "status", "run_name": "MLflow run",
                   "run_id": "run id", "device": "device", names.NUM_PARAMETERS: "params",
                   names.TRAIN_SECONDS: "train s", names.MEAN_CPU_UTILIZATION: "CPU %",
                   names.MEAN_GPU_UTILIZATION: "GPU %", "trial_id": "trial id"}
        present = [c for c in columns if c in self.trials]
        listing = self.trials[present].rename(columns=columns).copy()
        # The trial process's mean CPU (100: one core busy) and its GPUs' mean utilisation, sampled while it ran.
        for column in ("train s", "CPU %", "GPU %"):
            if column in listing:
                listing[column] = listing[column].map(lambda v: "–" if pd.isna(v) else f"{v:.1f}")
        if "params" in listing:
            listing["params"] = listing["params"].map(lambda v: "–" if pd.isna(v) else f"{v / 1e6:.2f}M")
        if "shared_with" in self.trials and self.trials["shared_with"].notna().any():
            # Rows that differ only in settings their trial does not read read one run (trial/trials.py).
            listing["run of"] = self.trials["shared_with"].map(
                lambda v: f"shared with {v}" if isinstance(v, str) else "–")
        if "computed_by" in self.trials and (self.trials["computed_by"].dropna() != self.study_name).any():
            listing["computed by"] = self.trials["computed_by"].map(  # reused from another study of the store
                lambda v: v if isinstance(v, str) and v != self.study_name else "this study")
        marks = code_marks(self.trials)
        if marks is not None:  # the trials mix code versions: each one's, the others' marked (setup.py)
            listing["code"] = marks
        return listing.fillna("–").astype(str)

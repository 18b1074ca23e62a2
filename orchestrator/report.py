"""Ablation reports built from the MLflow store, so they work for any run of the study, finished or not.

`study_results` gives one row per trial run (config and metric columns) for notebooks; `ablation_table`
pivots it the way the papers print it: rows = variants, columns = evaluation lengths.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .study import Study
from .tracking import StudyTracker, TRIAL_ID_TAG


def study_results(tracker: StudyTracker) -> pd.DataFrame:
    rows = []
    for run in tracker.trial_runs():
        tags = run.data.tags
        row = {
            "run_id": run.info.run_id,
            "status": run.info.status,
            "label": tags.get("label", run.info.run_name),
            "variant": tags.get("variant"),
            "seed": int(tags.get("seed", 0)),
            "row_index": int(tags.get("row_index", 0)),
            "baseline": tags.get("baseline") == "true",
            "trial_id": tags.get(TRIAL_ID_TAG),
            "error": tags.get("error"),
        }
        row.update({f"config.{key}": value for key, value in run.data.params.items()})
        row.update(run.data.metrics)
        rows.append(row)
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    # A trial redone after a crash has several runs; the latest finished one counts.
    frame = frame.sort_values(["row_index", "seed"]).reset_index(drop=True)
    return frame


def perplexity_columns(frame: pd.DataFrame) -> list[str]:
    columns = [c for c in frame.columns if c.startswith("ppl_") and c[4:].isdigit()]
    return sorted(columns, key=lambda c: int(c[4:]))


def ablation_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean (± std over seeds when there are several) of the final perplexity per evaluation length."""
    finished = frame[frame["status"] == "FINISHED"].drop_duplicates(["trial_id"], keep="last")
    columns = perplexity_columns(finished)
    labels = finished.sort_values("row_index")["label"].drop_duplicates().tolist()
    table = pd.DataFrame(index=pd.Index(labels, name="variant"))
    for column in columns:
        grouped = finished.groupby("label")[column]
        mean, std, count = grouped.mean(), grouped.std(), grouped.count()
        table[f"L={column[4:]}"] = [
            f"{mean[label]:.3f}" + (f" ± {std[label]:.3f}" if count[label] > 1 else "") for label in labels
        ]
    seeds = finished.groupby("label")["seed"].nunique()
    table["seeds"] = [int(seeds[label]) for label in labels]
    return table


def render_markdown(study: Study, frame: pd.DataFrame) -> str:
    lines = [f"# Ablation report: {study.name}", ""]
    if study.description:
        lines += [study.description.strip(), ""]
    if frame.empty or not (frame["status"] == "FINISHED").any():
        lines.append("No finished trials yet.")
    else:
        lines += [
            "Perplexity on the last K tokens of held-out windows at each evaluation length "
            "(final model; mean ± std over seeds where several). Lower is better.",
            "",
            ablation_table(frame).to_markdown(disable_numparse=True),
        ]
    unfinished = frame[frame["status"] != "FINISHED"] if not frame.empty else frame
    if not unfinished.empty:
        lines += ["", "## Trials not finished", ""]
        for _, row in unfinished.iterrows():
            reason = f": {row['error']}" if isinstance(row.get("error"), str) else ""
            lines.append(f"- {row['label']} · s{row['seed']}: {row['status']}{reason}")
    return "\n".join(lines) + "\n"


def write_report(study: Study, tracker: StudyTracker, reports_dir: Path) -> tuple[Path, str]:
    frame = study_results(tracker)
    folder = reports_dir / study.name
    folder.mkdir(parents=True, exist_ok=True)
    markdown = render_markdown(study, frame)
    (folder / "report.md").write_text(markdown)
    frame.to_csv(folder / "results.csv", index=False)
    tracker.log_artifacts(folder)
    return folder, markdown

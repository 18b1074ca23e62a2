"""A study's results and report, read from the MLflow store (so they work for a study run elsewhere,
interrupted or extended).

    from orchestrator.reporting import load_results
    frame = load_results("studies/kernel_size.yaml")  # one row per trial: config.*, swept.*, metric columns

`orchestrator report STUDY` writes reports/<study>/: report.md, report.html, tables.tex, CSVs and plots.
"""

from . import render_md
from .build import Report, build_report, write_report
from .results import ValueChoice, load_results, study_results

__all__ = ["Report", "build_report", "write_report", "render_md", "ValueChoice", "load_results", "study_results"]

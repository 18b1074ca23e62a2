"""A study's results and report, read from the MLflow store (so they work for a study run elsewhere,
interrupted or extended).

    from orchestrator.reporting import load_results
    frame = load_results("studies/kernel_size.yaml")  # one row per trial: config.*, swept.*, metric columns

`orchestrator report STUDY` writes reports/<study>/: report.md, report.html, tables.tex, CSVs and plots.
"""

from typing import TYPE_CHECKING

from dape_core.lazy import lazy_attributes

# Imported on first use (each name from the module that defines it): a submodule never needs this package's
# names, and reading results does not load the report's renderers and plots.
_PUBLIC = {"Report": "build", "build_report": "build", "ValueChoice": "results", "load_results": "results",
           "study_results": "results"}
__all__ = list(_PUBLIC)

if TYPE_CHECKING:
    from .build import Report, build_report
    from .results import ValueChoice, load_results, study_results

__getattr__, __dir__ = lazy_attributes(__name__, _PUBLIC)

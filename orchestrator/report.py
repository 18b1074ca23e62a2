"""Kept for existing imports: the report lives in orchestrator.reporting."""

from .reporting import build_report, load_results, study_results, write_report

__all__ = ["build_report", "load_results", "study_results", "write_report"]

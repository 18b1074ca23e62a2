"""orchestrator: study file -> validated study -> trials -> Ray Tune -> dape_core -> MLflow -> report."""

from .study import Study, StudyError, load_study, parse_study
from .trials import Trial, expand

__all__ = ["Study", "StudyError", "load_study", "parse_study", "Trial", "expand"]

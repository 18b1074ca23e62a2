"""The study format: a YAML file, validated (every problem at once, each with its field path) into a Study.

- model.py: the pydantic models of the format and the checks between fields;
- rows.py: the rows (cells) the variants, axes, zip and exclude make;
- overrides.py: dotted overrides of trial configs and of the study (profiles, `key=value`);
- load.py: YAML loading, profiles, per-trial validation by dape_core;
- problems.py: StudyError and how pydantic's errors become field-path messages;
- schema.py: the format as JSON Schema (`orchestrator schema`).
"""

from .load import load_study, parse_study, read_study_yaml, validate_config
from .model import SECTIONS, Distribution, ReportSpec, Resources, Scheduler, Search, Study, Variant
from .overrides import apply_study_overrides, parse_override, resolve, set_dotted
from .problems import StudyError
from .rows import Cell

__all__ = ["Cell", "Distribution", "ReportSpec", "Resources", "SECTIONS", "Scheduler", "Search", "Study",
           "StudyError", "Variant", "apply_study_overrides", "load_study", "parse_override", "parse_study",
           "read_study_yaml", "resolve", "set_dotted", "validate_config"]

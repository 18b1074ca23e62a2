"""The study format: a YAML file, validated (every problem at once, each with its field path) into a Study.

- model.py: the pydantic models of the format and the checks between fields;
- rows.py: the rows (cells) the variants, axes, zip and exclude make;
- overrides.py: dotted overrides of trial configs and of the study (profiles, `key=value`: load.py applies them);
- yaml_loader.py: YAML that means one thing: duplicate keys refused, size bounded (alias bombs);
- load.py: reading, profiles, and every check below gathered into one StudyError;
- trial_checks.py: every resolved trial (rows, search values) with its trial size validated by dape_core,
  duplicate identities (the size left out), run names; sweeps.py: exclude, seeds and variant keys that a sweep
  would silently ignore or overwrite;
  search_checks.py: searcher, ASHA and report metrics against what the trials log (trial_metrics.py);
- data_paths.py: data files and tokenizers that do not exist (run, plan, validate);
- expect.py: the `expect:` claims; claim_checks.py: each claim as checks on the rows (validation, verdicts);
- problems.py: StudyError and how pydantic's errors become field-path messages;
- schema.py: the format as JSON Schema (`orchestrator schema`).
"""

from .load import (
    apply_study_overrides,
    load_study,
    parse_study,
    profile_data_notes,
    read_study,
    read_study_yaml,
    validate_config,
)
from .model import SECTIONS, Decide, Distribution, ReportSpec, Resources, Scheduler, Search, Study, Variant
from .overrides import parse_override, resolve, set_dotted
from .problems import StudyError
from .rows import Cell

__all__ = ["Cell", "Decide", "Distribution", "ReportSpec", "Resources", "SECTIONS", "Scheduler", "Search", "Study",
           "StudyError", "Variant", "apply_study_overrides", "load_study", "parse_override", "parse_study",
           "profile_data_notes", "read_study", "read_study_yaml", "resolve", "set_dotted", "validate_config"]

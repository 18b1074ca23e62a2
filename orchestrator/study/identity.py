"""A trial's identity: a hash of its effective config, the fully resolved config less its trial size
(`distributed`) and with the settings the trial does not read (dape_core/applicability.py, logged as `n/a`)
left out. A trial is so recognised as already done no matter how the study file is reordered or relabelled,
and rows that differ only in settings their trial ignores (the Kerple baseline at every `model.d_dape` of a
grid) are one trial. The identity tags the trial's MLflow run and names its checkpoint folder; validation
(trial_checks.py) refuses two rows that would be one identity by mistake.

The legacy identity (issue 27) is the identity of stores written before the unused settings were left out:
the hash of the whole resolved config less `distributed`. A finished run tagged with it counts as done
(trial/trials.py `StoredIdentities`), and a checkpoint folder named by it is resumed (execution/trainable.py),
so that work done under the older identity is not trained again.
"""

from __future__ import annotations

import hashlib
import json

from dape_core import ExperimentConfig
from dape_core.applicability import unused_settings


def trial_identity(config: dict) -> str:
    """A hash of the trial's effective config: the resolved config without its `distributed` section and
    without the settings the trial does not read. How many workers compute a trial does not change what it
    computes (the same global batch, data order and result), so a trial killed on 8 workers resumes its
    checkpoint on 4, and a finished trial is not rerun because its size changed (the size is still logged
    with the trial's params); a setting the trial ignores does not change it either."""
    unused = unused_settings(ExperimentConfig(**config))
    return _digest({section: {key: value for key, value in values.items() if f"{section}.{key}" not in unused}
                    if isinstance(values, dict) else values
                    for section, values in config.items() if section != "distributed"})


def legacy_identity(config: dict) -> str:
    """The identity of stores written before `trial_identity` left the unused settings out: the hash of the
    whole resolved config less `distributed` (kept so that their finished runs and checkpoints are found)."""
    return _digest({section: values for section, values in config.items() if section != "distributed"})


def _digest(identity: dict) -> str:
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]

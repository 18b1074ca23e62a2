"""A restructuring of dape_core's components keeps every trial's identity: the hashes in
tests/data/trial_identities.json were computed from the catalogue's studies before the components moved to one
file each (issue 42), so that a store written before resumes its trials instead of training them again."""

import json
from pathlib import Path

import pytest

from orchestrator import expand, load_study

ROOT = Path(__file__).resolve().parent.parent
RECORDED = json.loads((ROOT / "tests/data/trial_identities.json").read_text())


@pytest.mark.parametrize("study", sorted(RECORDED))
def test_the_catalogues_trial_identities_are_unchanged(study):
    trials = expand(load_study(ROOT / f"studies/{study}.yaml"))
    assert sorted({trial.trial_id for trial in trials}) == RECORDED[study]

"""The SHA-256 of each kept model file, recorded on its trial's run when the file is logged, so that a file
changed since (a disk fault, a copy gone wrong, a hand edit) is refused by name rather than scored.

One tag per file, `orchestrator.sha256.model/<file>` = its hex SHA-256 (MLflow tags: visible and searchable
in its UI, no artifact to download to read them). Runs recorded before checksums were kept have none: their
files load unchecked, and the commands say so.
"""

from __future__ import annotations

from pathlib import Path

from ..trial.protocol import WEIGHTS_FOLDER

SHA_TAG_PREFIX = "orchestrator.sha256."  # + the file's path among the run's artifacts (model/model.safetensors)
UNCHECKED = ("no checksum recorded on its run (saved before checksums were kept): its weights are loaded "
             "unchecked")


def checksum_tags(files: list[Path]) -> dict[str, str]:
    """The tags recording each kept model file's SHA-256, as logged under the run's artifacts model/."""
    from dape_core.stored import CHECKSUMS_FILE, sha256_of

    return {f"{SHA_TAG_PREFIX}{WEIGHTS_FOLDER}/{path.name}": sha256_of(path) for path in files
            if path.name != CHECKSUMS_FILE}


def recorded_checksums(tags: dict[str, str]) -> dict[str, str]:
    """A run's recorded checksums: file name within its model folder -> SHA-256 at save; {} for a run recorded
    before they were kept."""
    prefix = f"{SHA_TAG_PREFIX}{WEIGHTS_FOLDER}/"
    return {key[len(prefix):]: value for key, value in tags.items() if key.startswith(prefix)}

"""The code fingerprint a trial run recorded (study/code_identity.py): its tag `orchestrator.code_fingerprint`
and its artifact `code_fingerprint.json` (the per-file hashes), read back from an embedded store's artifacts
folder directly, or through MLflow from a server."""

from __future__ import annotations

import tempfile
from pathlib import Path
from urllib.parse import unquote, urlparse

from ..study.code_identity import CodeFingerprint
from .store import CODE_FILE


def read_run_text(run, name: str, tracking_uri: str | None = None) -> str | None:
    """The text of the run's artifact `name`, None where it has none (or it cannot be read)."""
    artifact_uri = run.info.artifact_uri or ""
    parsed = urlparse(artifact_uri)
    if artifact_uri and parsed.scheme in ("", "file"):
        path = Path(unquote(parsed.path)) / name
        try:
            return path.read_text(encoding="utf-8")
        except OSError:
            return None
    try:
        import mlflow

        with tempfile.TemporaryDirectory(prefix="orchestrator_code_") as folder:
            local = mlflow.artifacts.download_artifacts(artifact_uri=f"{artifact_uri.rstrip('/')}/{name}",
                                                        dst_path=folder, tracking_uri=tracking_uri)
            return Path(local).read_text(encoding="utf-8")
    except Exception:  # noqa: BLE001 - a run without the file (or an unreadable one): its files are unknown
        return None


def stored_fingerprint(run, tracking_uri: str | None = None) -> CodeFingerprint | None:
    text = read_run_text(run, CODE_FILE, tracking_uri)
    if text is None:
        return None
    try:
        return CodeFingerprint.from_json(text)
    except (ValueError, KeyError, TypeError):
        return None

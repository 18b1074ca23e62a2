"""Whether a report on disk is already the report of its inputs: a finished study run again with nothing
changed must not redraw hundreds of panels. The fingerprint (report.fingerprint.json beside report.md) is a
hash of everything a report is made of: where its store is (the tracking URI and experiment the report
names: in a project copied elsewhere, or beside a moved store, the report is built again), the study as
parsed (`Study.model_dump`), the value chosen (final/best/step), the current code's fingerprint (study/
code_identity.py: the setup says when the trials' is another), the results frame (every trial's run id,
status, config, swept values and metrics: a rerun trial or a new trial changes it) and the source of the
code that draws and judges the report (orchestrator/reporting/*.py, orchestrator/judging/*.py); with it, the
figures' names and captions, the files written, the summary the command line prints, and whether the folder
was attached to the study's parent run. A report is kept when the fingerprint matches and all its files are there.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pandas as pd

from .plots import Plot

FILE = "report.fingerprint.json"


@dataclass
class Kept:
    plots: list[Plot]
    files: list[Path]
    attached: bool
    summary: str  # what the command line prints (render_md.summary), written with the report


@cache
def _code() -> str:
    digest = hashlib.sha256()
    package = Path(__file__).parent
    for folder in (package, package.parent / "judging"):  # what draws the report, and the rule that judges it
        for path in sorted(folder.glob("*.py")):
            digest.update(f"{folder.name}/{path.name}".encode() + path.read_bytes())
    return digest.hexdigest()


def of_inputs(study, frame: pd.DataFrame, value, current_code: str = "", store: str = "") -> str:
    """`current_code`: the code fingerprint of the checkout building it (the setup says where the trials' is
    another); `store`: where the store it reads is, as the report names it (tracking URI, experiment)."""
    digest = hashlib.sha256(current_code.encode())
    digest.update(b"store:" + store.encode() + b"\x00")
    digest.update(json.dumps(study.model_dump(mode="json"), sort_keys=True, default=str).encode())
    digest.update(repr(value).encode())
    digest.update(repr(study._profile).encode())  # noqa: SLF001  which profile's published values it shows
    digest.update(frame.to_csv(index=False).encode())
    digest.update(_code().encode())
    return digest.hexdigest()


def unchanged(folder: Path, inputs: str) -> Kept | None:
    """The kept report's figures and files where the fingerprint on disk is `inputs` and every file is there."""
    try:
        record = json.loads((folder / FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if record.get("inputs") != inputs or not isinstance(record.get("summary"), str):
        return None
    files = [folder / name for name in record.get("files", [])]
    plots = [Plot(p["name"], p["title"], p["caption"], folder / p["path"],
                  folder / p["vector"] if p.get("vector") else None)
             for p in record.get("plots", [])]
    if not all(path.is_file() for path in files + [plot.path for plot in plots]):
        return None
    return Kept(plots, files, bool(record.get("attached")), record["summary"])


def write(folder: Path, inputs: str, plots: list[Plot], files: list[Path], attached: bool, summary: str) -> None:
    record = {"inputs": inputs, "attached": attached, "summary": summary,
              "files": [str(path.relative_to(folder)) for path in files],
              "plots": [{"name": p.name, "title": p.title, "caption": p.caption,
                         "path": str(p.path.relative_to(folder)),
                         "vector": str(p.vector.relative_to(folder)) if p.vector else None} for p in plots]}
    (folder / FILE).write_text(json.dumps(record, indent=1), encoding="utf-8")


def mark_attached(folder: Path) -> None:
    path = folder / FILE
    record = json.loads(path.read_text(encoding="utf-8"))
    path.write_text(json.dumps({**record, "attached": True}, indent=1), encoding="utf-8")


def forget(folder: Path) -> None:
    """The report is being rebuilt: until it is whole, nothing on disk is kept."""
    (folder / FILE).unlink(missing_ok=True)

"""`orchestrator schema`: the study file's JSON Schema, for editor completion."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .output import console


def schema(output: Path | None) -> None:
    from ..study.schema import study_json_schema

    text = json.dumps(study_json_schema(), indent=2)
    if output:
        output.write_text(text + "\n")
        console.print(f"Wrote {output}")
    else:
        sys.stdout.write(text + "\n")

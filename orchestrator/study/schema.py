"""The study file's JSON Schema, with `base` described by dape_core's ExperimentConfig so that editors
complete and check trial settings too."""

from __future__ import annotations

from pydantic import TypeAdapter

from dape_core import ExperimentConfig

from .model import Study


def study_json_schema() -> dict:
    schema = Study.model_json_schema()
    experiment = TypeAdapter(ExperimentConfig).json_schema(ref_template="#/$defs/{model}")
    schema.setdefault("$defs", {}).update(experiment.pop("$defs", {}))
    schema["$defs"]["ExperimentConfig"] = experiment
    schema["properties"]["base"] = {"$ref": "#/$defs/ExperimentConfig",
                                    "description": "Shared trial config: model, data, train, eval (and che for CHE "
                                                   "tasks)."}
    schema["title"] = "DAPE orchestrator study"
    return schema

"""The report's provenance section (after the tables and plots): which code, data, software and hardware
produced its numbers, read from the trials' runs (tags `code_version`, `data_hash`, `device` and the `env.*` tags
each trial's process reported: dape_core/environment.py). A fact that differs between trials lists every value; one
a run did not record (a run from before it was recorded) says so. The device and its hardware are the setup's
(setup.py, `hardware`): named once in the report."""

from __future__ import annotations

import pandas as pd

from ..tracking.store import ENV_TAG_PREFIX

NOT_RECORDED = "not recorded"


def _env(row: pd.Series, key: str) -> str | None:
    value = row.get(f"{ENV_TAG_PREFIX}{key}")
    return value if isinstance(value, str) and value else None


def _software(row: pd.Series) -> str | None:
    if _env(row, "torch") is None:
        return None
    names = (("python", "Python"), ("torch", "torch"), ("triton", "Triton"), ("ray", "Ray"), ("mlflow", "MLflow"),
             ("optuna", "Optuna"), ("pydantic", "pydantic"), ("numpy", "NumPy"))
    text = ", ".join(f"{name} {_env(row, key) or '?'}" for key, name in names)
    return f"{text}; {_env(row, 'platform') or '?'}"


def _cuda(row: pd.Series) -> str | None:
    if _env(row, "torch_cuda") is None:
        return None
    if _env(row, "torch_cuda") == "none":
        return "none (a CPU build of torch)"
    return (f"CUDA {_env(row, 'torch_cuda')} (torch's build), cuDNN {_env(row, 'cudnn') or '?'}, driver "
            f"{_env(row, 'cuda_driver') or '?'}")


def hardware(row: pd.Series) -> str | None:
    """The machine a run ran on ("cpu: AMD EPYC ... (16 CPU cores on the machine)"), None where not recorded."""
    model = _env(row, "device_model")
    if model is None:
        return None
    device = _env(row, "device") or str(row.get("device") or "?")
    if device.startswith("cuda"):
        return f"{device}: {model}, {_env(row, 'device_memory_gb')} GB ({_env(row, 'gpu_count')} GPU(s) visible)"
    return f"{device}: {model} ({_env(row, 'cpu_count')} CPU cores on the machine)"


def _threads(row: pd.Series) -> str | None:
    return _env(row, "torch_threads")


def _tag(column: str):
    return lambda row: str(row[column]) if isinstance(row.get(column), str) and row.get(column) else None


FACTS = (
    ("code version", _tag("code_version")),
    ("data hash", _tag("data_hash")),
    ("torch threads per trial", _threads),
    ("software", _software),
    ("CUDA", _cuda),
)


def provenance(trials: pd.DataFrame) -> list[tuple[str, str]]:
    """(name, value) per fact over the finished trials (whose numbers the report shows): every distinct value,
    "not recorded" for runs that lack it (runs from before it was recorded)."""
    ran = trials[trials["status"] == "FINISHED"] if "status" in trials else trials
    facts = []
    for name, read in FACTS:
        values = [read(row) for _, row in ran.iterrows()]
        known = sorted({value for value in values if value})
        if not known:
            if values:
                facts.append((name, f"{NOT_RECORDED} (runs from before it was recorded)"))
            continue
        missing = sum(value is None for value in values)
        text = " | ".join(known) + (f" (differs between trials: {len(known)} values)" if len(known) > 1 else "")
        if missing:
            text += f"; {missing} run(s): {NOT_RECORDED}"
        if name == "code version" and any("-dirty-" in value for value in known):
            text += " (uncommitted changes: their diff is the parent run's artifact uncommitted.diff)"
        facts.append((name, text))
    return facts

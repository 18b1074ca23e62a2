"""A trained model kept on disk: its weights (safetensors, never pickle), its effective config and what its data
was, in one folder, so that it can be evaluated again, timed or inspected without retraining.

Folder layout (`save_model`):
- `model.safetensors`: the full state dict in float32 or the dtype it trained in (a sharded FSDP model is
  gathered into one plain model before it is saved, so it loads on one device);
- `config.json`: `ExperimentConfig.to_dict()`, the effective config (what the model and trainer used);
- `data.json`: the data record (source, split sizes, tokenizer) and its content hash;
- `checksums.json`: the SHA-256 of each of the three files above, as written.

Every file is checked against its SHA-256 before it is loaded: `load_model` refuses a file that changed since
it was saved (WeightsChanged, naming the file), checking the `checksums` it is given (the orchestrator passes
the ones its run recorded at save, the tags `orchestrator.sha256.model/<file>`), else the folder's own
`checksums.json`. A folder saved before checksums were kept has neither and loads unchecked
(`unchecked(folder)` says so).

`load_model(folder)` is the notebook's door: `model, cfg = load_model("path/to/model")`. A stored run of the
orchestrator is found by its MLflow run id with `orchestrator.evaluation.weights.load_run(run_id)`, which
resolves the run's artifact folder and calls this.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from .experiment_config import ExperimentConfig

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
DATA_FILE = "data.json"
CHECKSUMS_FILE = "checksums.json"
FORMAT = "1"


class WeightsUnreadable(RuntimeError):
    """A stored model's folder is incomplete, truncated or not a model of its config: the message names the file."""


class WeightsChanged(WeightsUnreadable):
    """A stored file's bytes are not those saved: its SHA-256 differs from the one recorded at save."""


def sha256_of(path: str | Path) -> str:
    """The file's SHA-256, hex, read in blocks (a model's weights need not fit in memory twice)."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def saved_checksums(folder: str | Path) -> dict[str, str] | None:
    """The folder's own `checksums.json` (file name -> SHA-256 at save), None where it has none (saved before
    checksums were kept) or it cannot be read as one."""
    try:
        data = json.loads((Path(folder) / CHECKSUMS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else None


def changed_files(folder: str | Path, checksums: dict[str, str]) -> list[str]:
    """One line per file of `checksums` (name -> SHA-256 at save) whose bytes in `folder` differ, or that is
    missing; [] where every one is as saved."""
    problems = []
    for name, expected in sorted(checksums.items()):
        path = Path(folder) / name
        if not path.is_file():
            problems.append(f"{path} is missing (it was saved with SHA-256 {expected[:16]}…)")
            continue
        found = sha256_of(path)
        if found != expected:
            problems.append(f"{path} changed since it was saved (SHA-256 {found[:16]}…, recorded at save "
                            f"{expected[:16]}…)")
    return problems


def verify_files(folder: str | Path, checksums: dict[str, str] | None = None) -> bool:
    """Check the folder's files against `checksums` (else its own checksums.json); raises WeightsChanged naming
    each changed file. Returns False where there is nothing to check against (saved before checksums were
    kept), True where every file is as saved."""
    expected = checksums or saved_checksums(folder)
    if not expected:
        return False
    problems = changed_files(folder, expected)
    if problems:
        raise WeightsChanged("; ".join(problems) + ": its scores would not be the trained model's. Restore the "
                             "file from a backup, or delete the run and train the trial again")
    return True


@dataclass
class StoredModel:
    model: "torch.nn.Module"
    config: "ExperimentConfig"
    data_hash: str
    folder: Path


def weights_bytes(num_parameters: int, bytes_per_parameter: int = 4) -> int:
    """The size of a stored model's weights file: its parameters in float32 (the header is a few KB)."""
    return num_parameters * bytes_per_parameter


def save_model(model: "torch.nn.Module", cfg: "ExperimentConfig", data_hash: str, data_record: dict,
               folder: str | Path) -> list[Path]:
    """Write the model's weights, config and data record into `folder`; returns the files written. Each file is
    written to a temporary name and renamed, so a crash never leaves a truncated file under its final name."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {name: tensor.detach().to("cpu").contiguous() for name, tensor in model.state_dict().items()}
    metadata = {"format": FORMAT, "fingerprint": cfg.fingerprint(), "data_hash": data_hash}
    weights = folder / WEIGHTS_FILE
    _atomic(weights, lambda path: save_file(state, str(path), metadata=metadata))
    config = folder / CONFIG_FILE
    _atomic(config, lambda path: path.write_text(json.dumps(cfg.to_dict(), indent=1, default=str), encoding="utf-8"))
    data = folder / DATA_FILE
    record = {**data_record, "content_hash": data_hash}
    _atomic(data, lambda path: path.write_text(json.dumps(record, indent=1, default=str), encoding="utf-8"))
    sums = {path.name: sha256_of(path) for path in (weights, config, data)}
    checksums = folder / CHECKSUMS_FILE
    _atomic(checksums, lambda path: path.write_text(json.dumps(sums, indent=1), encoding="utf-8"))
    return [weights, config, data, checksums]


def _atomic(path: Path, write) -> None:
    temporary = path.with_name(path.name + ".tmp")
    write(temporary)
    # safetensors creates its file with mode 0600 whatever the umask: a colleague reading the shared store (and
    # the store's copy, which keeps the mode) could not load the model. Files follow the user's umask instead.
    os.chmod(temporary, 0o666 & ~current_umask())
    temporary.replace(path)


def current_umask() -> int:
    """This process's umask (Linux reads it without changing it; elsewhere it is set and put back)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def read_config(folder: str | Path) -> "ExperimentConfig":
    """The stored model's effective config. Raises WeightsUnreadable naming the file."""
    from .experiment_config import ExperimentConfig

    path = Path(folder) / CONFIG_FILE
    try:
        return ExperimentConfig(**json.loads(path.read_text(encoding="utf-8")))
    except FileNotFoundError:
        raise WeightsUnreadable(f"{path} is missing: the stored model's folder is incomplete") from None
    except Exception as error:
        raise WeightsUnreadable(f"{path} is not a readable experiment config ({type(error).__name__}: "
                                f"{str(error)[:300]})") from None


def load_model(folder: str | Path, device: "str | torch.device" = "cpu",
               checksums: dict[str, str] | None = None) -> StoredModel:
    """The model of a stored folder, built from its config with its weights loaded (strictly: every tensor,
    of its shape), in evaluation mode on `device`. Raises WeightsUnreadable naming the file when the weights
    are missing, truncated, corrupted or belong to another config; where they read as a model of the config,
    WeightsChanged naming each file whose SHA-256 is not the one recorded at save: `checksums` (file name ->
    SHA-256), else the folder's checksums.json (none: loaded unchecked)."""
    from safetensors import safe_open

    from .model import build_model

    folder = Path(folder)
    cfg = read_config(folder)
    path = folder / WEIGHTS_FILE
    if not path.is_file():
        raise WeightsUnreadable(f"{path} is missing: the stored model's folder has no weights")
    try:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            metadata = handle.metadata() or {}
            state = {name: handle.get_tensor(name) for name in handle.keys()}
    except Exception as error:
        raise WeightsUnreadable(f"{path} cannot be read: it is truncated or not a safetensors file "
                                f"({type(error).__name__}: {str(error)[:200]})") from None
    if metadata.get("fingerprint") not in (None, cfg.fingerprint()):
        raise WeightsUnreadable(f"{path} was written by another config (fingerprint {metadata.get('fingerprint')}, "
                                f"{folder / CONFIG_FILE} gives {cfg.fingerprint()})")
    verify_files(folder, checksums)  # readable, of this config: are these the bytes saved?
    model = build_model(cfg.model)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as error:
        raise WeightsUnreadable(f"{path} does not match the model of its config: {str(error)[:300]}") from None
    model = model.to(device).eval()
    return StoredModel(model, cfg, metadata.get("data_hash", ""), folder)

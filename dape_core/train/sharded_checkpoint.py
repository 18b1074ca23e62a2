"""Checkpoints of a multi-worker run, written by every rank at once with `torch.distributed.checkpoint`
(DCP): each rank writes its own shards of the model and optimizer state (FSDP) or rank 0 the replicated
tensors (DDP), and DCP records every tensor's global shape, so the checkpoint loads on any number of
workers, one included (DCP reshards on load).

Layout, in the trial's checkpoint folder (beside the single-file `trainer.pt` of one-worker runs):

    sharded/step_000040/    .metadata and the *.distcp shards (model, optimizer)
                            meta.pt          rank 0: format, config fingerprint, progress, loss scaler
                            rng_rank<r>.pt   each rank: its torch RNG and batch-source state
    sharded/latest          the name of the last complete step folder

`latest` is replaced (atomically, by rank 0) only after every rank has written its part, so a run killed
mid-save resumes from the previous complete checkpoint; older folders are deleted after that.

DCP is imported by the functions that use it: every one-worker trial asks whether sharded checkpoints exist,
and importing DCP for that would cost it two seconds.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .checkpoint_file import check_header, write_atomically
from .distributed import World, unwrap

FORMAT = 1


class ShardedCheckpoints:
    def __init__(self, directory: Path, fingerprint: str):
        self.directory = Path(directory)
        self.fingerprint = fingerprint

    @property
    def pointer(self) -> Path:
        return self.directory / "latest"

    def latest(self) -> Path | None:
        if not self.pointer.is_file():
            return None
        folder = self.directory / self.pointer.read_text().strip()
        return folder if folder.is_dir() else None

    def exists(self) -> bool:
        return self.latest() is not None

    def save(self, step: int, model: nn.Module, optimizer: torch.optim.Optimizer, meta: dict, rank_state: dict,
             world: World) -> Path:
        """Collective: every rank calls it at the same step."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        folder = self.directory / f"step_{step:06d}"
        if world.is_main and folder.exists():  # left by a run killed while writing this very step
            shutil.rmtree(folder)
        world.barrier()
        model_state, optimizer_state = get_state_dict(model, optimizer)
        dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=str(folder))
        write_atomically(folder / f"rng_rank{world.rank}.pt", lambda handle: torch.save(rank_state, handle))
        if world.is_main:
            record = {"format": FORMAT, "fingerprint": self.fingerprint, "world_size": world.size, **meta}
            write_atomically(folder / "meta.pt", lambda handle: torch.save(record, handle))
        world.barrier()  # every rank's part is on disk
        if world.is_main:
            write_atomically(self.pointer, lambda handle: handle.write(folder.name.encode()))
            for old in self.directory.glob("step_*"):
                if old != folder:
                    shutil.rmtree(old, ignore_errors=True)
        world.barrier()  # nobody reports the checkpoint before `latest` names it
        return folder

    def load(self, model: nn.Module, optimizer: torch.optim.Optimizer, world: World) -> tuple[dict, dict]:
        """Load the latest checkpoint into `model` and `optimizer` (resharded for this world) and return
        (meta, this rank's RNG state). A rank beyond the writers' count takes rank 0's RNG state: the
        batch source and the torch RNG are the same on every rank by construction."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        folder = self.latest()
        assert folder is not None, "load() is called where a checkpoint exists (exists())"
        meta = torch.load(folder / "meta.pt", weights_only=True)
        check_header(meta, folder, FORMAT, self.fingerprint, kind="sharded checkpoint")
        model_state, optimizer_state = get_state_dict(model, optimizer)  # templates: this world's shapes
        state: dict[str, Any] = {"model": model_state, "optimizer": optimizer_state}
        dcp.load(state, checkpoint_id=str(folder))
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
        rank_file = folder / f"rng_rank{world.rank}.pt"
        if not rank_file.is_file():
            rank_file = folder / "rng_rank0.pt"
        return meta, torch.load(rank_file, weights_only=True)

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def load_full_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
    """A one-worker checkpoint (`trainer.pt`: full tensors, the optimizer state keyed by parameter index)
    into a wrapped model and its optimizer: every rank reads the whole file and keeps its part."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True)
    set_model_state_dict(model, state["model"], options=options)
    names = {id(parameter): name for name, parameter in unwrap(model).named_parameters()}
    ordered = [names[id(parameter)] for group in optimizer.param_groups for parameter in group["params"]]
    saved = state["optimizer"]
    by_name: dict[str, Any] = {"state": {ordered[index]: value for index, value in saved["state"].items()},
               "param_groups": [{**group, "params": [ordered[index] for index in group["params"]]}
                                for group in saved["param_groups"]]}
    set_optimizer_state_dict(model, optimizer, by_name, options=options)

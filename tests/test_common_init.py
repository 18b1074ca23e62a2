"""Common random numbers (dape_core/random_streams.py): at one seed, every parameter that two of a study's
variants share starts identical, whatever encodings, processors or plugins either adds; another seed is another
network. Checked on the catalogue's kernel_size, position_encoding and d_dape rows and on the example plugin's
study (examples/kq_conv.yaml), as the trials build them."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from dape_core import ExperimentConfig
from dape_core.model import build_model
from dape_core.random_streams import drawn_from, stream_seed
from orchestrator import expand, load_study
from tests.registry_support import restored_registry

ROOT = Path(__file__).resolve().parent.parent
STUDIES = ["studies/kernel_size.yaml", "studies/position_encoding.yaml", "studies/d_dape.yaml",
           "examples/kq_conv.yaml"]


@pytest.fixture(autouse=True)
def registry_restored(tmp_path_factory):
    """The example plugin's registration is undone after each test."""
    with restored_registry(tmp_path_factory):
        yield


def _rows(study: str) -> dict[str, ExperimentConfig]:
    """One experiment config per row of the study (its first seed's trial)."""
    rows: dict[str, ExperimentConfig] = {}
    for trial in expand(load_study(ROOT / study)):
        rows.setdefault(trial.label, ExperimentConfig(**trial.config))
    return rows


def _part(name: str) -> str:
    """Which part of the model a parameter belongs to: the transformer's own, or a component's."""
    return "encoding" if ".pos." in name else "processor" if ".processor." in name else "base"


def _built(rows: dict[str, ExperimentConfig], seed: int) -> dict[str, dict[str, torch.Tensor]]:
    torch.manual_seed(12345)  # the global generator's state must not matter: the seed is given
    return {label: dict(build_model(cfg.model, seed=seed).named_parameters()) for label, cfg in rows.items()}


def _same_component(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], part: str, prefix: str) -> bool:
    """Two layers' components of one part are the same component where their parameters have the same names
    and shapes (a component's default init depends on its shapes alone)."""
    def shapes(params):
        return {name: tuple(p.shape) for name, p in params.items() if name.startswith(prefix) and _part(name) == part}
    return shapes(a) == shapes(b)


@pytest.mark.parametrize("study", STUDIES)
def test_every_shared_parameter_starts_identical_at_one_seed(study):
    rows = _rows(study)
    assert len(rows) >= 3, rows
    models = _built(rows, seed=7)
    checked = {"base": 0, "encoding": 0, "processor": 0}
    for (label_a, a), (label_b, b) in itertools.combinations(models.items(), 2):
        kinds = {label: (rows[label].model.pos_encoding, rows[label].model.processor) for label in (label_a, label_b)}
        for name in sorted(set(a) & set(b)):
            part = _part(name)
            if a[name].shape != b[name].shape:
                continue
            if part == "encoding" and kinds[label_a][0] != kinds[label_b][0]:
                continue  # another encoding: its own stream
            if part == "processor" and (kinds[label_a][1] != kinds[label_b][1] or not _same_component(
                    a, b, part, name.split(".processor.")[0])):
                continue  # another processor, or the same one at other settings (another kernel, D_dape)
            assert torch.equal(a[name], b[name]), f"{study}: {name} differs between {label_a} and {label_b}"
            checked[part] += 1
    assert checked["base"] > 0 and checked["encoding"] > 0, checked


@pytest.mark.parametrize("study", STUDIES)
def test_another_seed_is_another_network(study):
    rows = _rows(study)
    first, second = _built(rows, seed=0), _built(rows, seed=1)
    for label in rows:
        for name, value in first[label].items():
            if value.numel() > 1 and bool(value.std() > 0):  # drawn at random (not a LayerNorm's ones and zeros)
                assert not torch.equal(value, second[label][name]), f"{study}: {label}'s {name} ignores the seed"


def test_the_seed_defaults_to_the_global_generators_and_building_draws_nothing_from_it():
    cfg = ExperimentConfig(model={"preset": "tiny", "pos_encoding": "fire", "processor": "dapev2",
                                  "kernel_size": 3}).model
    torch.manual_seed(3)
    before = torch.random.get_rng_state()
    implicit = build_model(cfg).state_dict()
    assert torch.equal(torch.random.get_rng_state(), before)  # the caller's stream is where it was
    explicit = build_model(cfg, seed=3).state_dict()
    assert all(torch.equal(implicit[name], explicit[name]) for name in implicit)


def test_streams_are_keyed_and_restore_the_global_generator():
    assert stream_seed(0, "processor", "dapev2", 1) != stream_seed(0, "processor", "dapev2", 2)
    assert stream_seed(0, "encoding", "kerple", 0) != stream_seed(1, "encoding", "kerple", 0)
    assert 0 <= stream_seed(2**32 - 1, "base", "head.weight") < 2**63
    torch.manual_seed(0)
    with drawn_from(5, "a"):
        inside = torch.rand(3)
    after = torch.rand(3)
    torch.manual_seed(0)
    assert torch.equal(after, torch.rand(3))  # the block drew nothing from the global stream
    with drawn_from(5, "a"):
        assert torch.equal(inside, torch.rand(3))

"""A built model travels whole (issue 55): `torch.save(model)`, `pickle`, `copy.deepcopy` and `ray.put` give back
the same model, its state dict and its outputs on a fixed input identical, for every registered encoding and
processor (built-in, contrib's) and a plugin's (examples/kq_conv.py). A component's torch classes are defined
at the top level of their file, so they pickle by reference; its record (`facts`) travels by name
(dape_core/registry.py `_ByName`). A process that has imported nothing unpickles a saved model too (a spawned
worker's case): unpickling the classes imports their files, which registers the records."""

from __future__ import annotations

import copy
import io
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from registry_support import restored_registry

from dape_core import ModelConfig, build_model, components, plugins

ROOT = Path(__file__).resolve().parent.parent
SIZE = {"preset": "tiny", "n_layer": 2, "d_model": 16, "n_head": 2, "vocab_size": 32, "d_dape": 4}
TOKENS = torch.arange(20).remainder(32)[None]  # one fixed input of 20 tokens


def _cases() -> list[dict]:
    components.discover_contrib()  # contrib's components are registered ones too
    cases = [{"pos_encoding": name} for name in components.encodings.names()]
    cases += [{"pos_encoding": "kerple", "processor": name} for name in components.processors.names() if name != "none"]
    cases.append({"pos_encoding": "nope", "processor": "dape"})  # the no_bias form
    return cases


CASES = _cases()


def _model(case: dict) -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model(ModelConfig(**SIZE, **case)).eval()


def _outputs(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(TOKENS)


def _torch_save(model):
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)


ROUND_TRIPS = {"torch.save": _torch_save, "pickle": lambda model: pickle.loads(pickle.dumps(model)),
               "deepcopy": copy.deepcopy}


def _assert_same(model, back) -> None:
    assert back is not model and type(back) is type(model)
    state, state_back = model.state_dict(), back.state_dict()
    assert list(state) == list(state_back)
    assert all(torch.equal(state[key], state_back[key]) for key in state)
    assert torch.equal(_outputs(model), _outputs(back))
    for layer, layer_back in zip(model.blocks, back.blocks):
        assert layer_back.attn.pos.facts is layer.attn.pos.facts  # the registered record, not a copy
        processor, processor_back = layer.attn.processor, layer_back.attn.processor
        assert (processor_back is None) == (processor is None)
        if processor is not None:
            assert processor_back.facts is processor.facts


@pytest.mark.parametrize("trip", list(ROUND_TRIPS))
@pytest.mark.parametrize("case", CASES, ids=lambda case: "-".join(map(str, case.values())))
def test_a_model_of_every_component_round_trips(case, trip):
    model = _model(case)
    _assert_same(model, ROUND_TRIPS[trip](model))


@pytest.fixture
def plugin_loaded(tmp_path_factory):
    """The example plugin loaded as a study loads it (a file: its module made from its source), then forgotten."""
    with restored_registry(tmp_path_factory):
        plugins.load("kq_conv.py", ROOT / "examples")
        yield


@pytest.mark.parametrize("trip", list(ROUND_TRIPS))
def test_a_plugins_component_round_trips(plugin_loaded, trip):
    model = _model({"pos_encoding": "alibi", "processor": "kq_conv", "options": {"kq_rows": 2, "kq_cols": 3}})
    assert type(model.blocks[0].attn.processor).__module__ == "kq_conv"
    _assert_same(model, ROUND_TRIPS[trip](model))


def test_a_saved_model_loads_in_a_fresh_process(tmp_path):
    """Every case saved with `torch.save`; a new interpreter, which has imported nothing of dape_core, loads
    them and computes the same outputs."""
    saved = tmp_path / "models.pt"
    torch.save([(_model(case), _outputs(_model(case))) for case in CASES], saved)
    probe = ("import torch\n"
             f"torch.set_num_threads({torch.get_num_threads()})\n"  # the parent's: the same summation order
             "tokens = torch.arange(20).remainder(32)[None]\n"
             f"loaded = torch.load({str(saved)!r}, weights_only=False)\n"
             "for model, expected in loaded:\n"
             "    with torch.no_grad():\n"
             "        assert torch.equal(model(tokens), expected), type(model.blocks[0].attn.pos)\n"
             "print('same outputs:', len(loaded))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, env=env,
                            cwd=tmp_path)
    assert result.returncode == 0 and f"same outputs: {len(CASES)}" in result.stdout, result.stderr


@pytest.mark.slow
def test_ray_put_gives_back_the_same_model(local_ray, tmp_path_factory):
    """`ray.put` / `ray.get` for every case and the plugin's (the session's Ray: marked slow)."""
    for case in CASES:
        model = _model(case)
        _assert_same(model, local_ray.get(local_ray.put(model)))
    with restored_registry(tmp_path_factory):
        plugins.load("kq_conv.py", ROOT / "examples")
        model = _model({"pos_encoding": "alibi", "processor": "kq_conv"})
        _assert_same(model, local_ray.get(local_ray.put(model)))

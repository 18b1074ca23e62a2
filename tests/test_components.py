"""Components that describe themselves (dape_core/components.py): every floor reads a component's record
through the registry, none branches on a component's name, and a built-in added through the public API is one
file (dape_core/contrib/sandwich.py) that validation, the model, the plan, the report's words and the
applicability rule all take."""

import ast
from pathlib import Path

import pytest
import torch

from dape_core import ExperimentConfig, ModelConfig, build_model
from dape_core.applicability import unused_settings
from dape_core.components import (
    ComponentError,
    Cost,
    Processor,
    Setting,
    encodings,
    forms,
    processors,
)
from orchestrator.planning.estimate import forward_flops_per_sequence
from orchestrator.planning.learned import shape_key
from orchestrator.reporting import names
from orchestrator.tracking.params import flatten

ROOT = Path(__file__).resolve().parent.parent
RECORD_TABLES = {"dape_core/registry.py", "dape_core/components.py"}  # and the component files:
COMPONENT_FOLDERS = ("dape_core/encodings/", "dape_core/processors/", "dape_core/contrib/")
# The places that read the registry: what a new component gets without their being edited.
READERS = {
    "dape_core/config.py",  # the names a study may give (and the schema's enums), options, parameter count
    "dape_core/applicability.py",  # the settings a run does not read
    "dape_core/doctor/exactness.py",  # the processor the fused kernels are checked with (benchmark.py too)
    "orchestrator/planning/estimate.py",  # FLOPs and memory per score-map entry
    "orchestrator/planning/learned.py",  # the processor settings that set a step's cost
    "orchestrator/reporting/names.py",  # the words of components and their settings
    "dape_core/plugins.py",  # a study's plugins: what each registered (and forgetting it on a fault)
    "orchestrator/study/code_identity.py",  # the records a trial builds: their files belong to its fingerprint
}
# ...and the ones that read a record through the model config or the built module, not the registry itself:
# attention.py (Cost.working for the CUDA block budget), evaluate/flops.py (Cost.macs), fused/__init__.py (the
# processor's `fused`, its form's `fused_mode` and `adds_bias`), doctor/benchmark.py (exactness.fused_processor),
# contract.py (builds the model of a trial's components), orchestrator/study/contract_checks.py (the records' owners).


def _sources(*folders: str):
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path


def test_the_places_that_read_the_registry():
    readers = set()
    for name, path in _sources("dape_core", "orchestrator"):
        if name in RECORD_TABLES or name.startswith(COMPONENT_FOLDERS):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and (
                    node.module.split(".")[-1] in ("components", "registry", "encodings", "processors")
                    or any(alias.name in ("components",) for alias in node.names)):
                readers.add(name)
    assert readers == READERS


def _component_names() -> set[str]:
    return (set(encodings.names()) | set(processors.names()) | set(forms.names())) - {"none"}


def test_no_module_branches_on_a_component_name():
    """No comparison with, or dict keyed by, a component's name outside the record tables; no comparison of
    the settings that name components (`.processor`, `.pos_encoding`) with a string (a `.form` is also CHE's)."""
    named = _component_names()
    found = []
    for name, path in _sources("dape_core", "orchestrator"):
        if name in RECORD_TABLES or name.startswith(COMPONENT_FOLDERS):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            constants, operands = [], []
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                for operand in operands:
                    elements = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
                    constants += [e for e in elements if isinstance(e, ast.Constant) and isinstance(e.value, str)]
                setting = any(isinstance(o, ast.Attribute) and o.attr in ("processor", "pos_encoding")
                              for o in operands)
                if setting and constants:
                    found.append((name, node.lineno, "a component setting compared with a string"))
            if isinstance(node, ast.Dict):
                constants += [k for k in node.keys if isinstance(k, ast.Constant)]
            found += [(name, c.lineno, c.value) for c in constants if c.value in named]
    assert found == []


def test_a_builtin_added_through_the_api_is_one_file():
    """Sandwich lives in dape_core/contrib/sandwich.py alone, and everything takes it from its record."""
    mentions = [name for name, path in _sources("dape_core", "orchestrator")
                if "sandwich" in path.read_text().lower() and name != "dape_core/contrib/sandwich.py"]
    assert mentions == []
    cfg = ExperimentConfig(model={"preset": "tiny", "pos_encoding": "sandwich", "processor": "dapev2",
                                  "options": {"sandwich_dim": 32}},
                           train={"seq_len": 32}, eval={"lengths": [32]})
    model = cfg.model
    assert model.encoding.has_bias and model.encoding.fused and model.encoding.owner == "dape_core.contrib.sandwich"
    assert model.processor_in_channels == 2 * model.n_head  # a bias: DAPE reads [S, B]
    built = build_model(model)
    assert built.num_parameters() == model.num_parameters()
    bias = built.blocks[0].attn.pos.bias(torch.arange(6), torch.arange(6))
    assert bias.shape == (model.n_head, 6, 6) and torch.all(bias[:, 3, 3] == 0) and torch.all(bias[:, 5, 0] < 0)
    # the plan counts its cost per score-map entry (one cosine per frequency)
    plain = ModelConfig(preset="tiny", pos_encoding="alibi", processor="dapev2")
    params = model.num_parameters()
    extra = forward_flops_per_sequence(model, 32, params) - forward_flops_per_sequence(plain, 32, params)
    assert extra == model.n_layer * 2 * 16 * 32**2
    # words, learned-step key, applicability: its option is a setting like any other
    assert names.value("model.pos_encoding", "sandwich") == "Sandwich"
    assert names.setting("model.options.sandwich_dim") == "Sandwich's sinusoid dimension"
    assert ("model.options.sandwich_dim", "32") in shape_key(flatten(cfg.to_dict()), "cpu")
    assert "model.fire_width" in unused_settings(cfg) and not any("options" in key for key in unused_settings(cfg))
    with pytest.raises(ValueError, match=r"options.sandwich_dim \(sandwich's\): .*must be even"):
        ModelConfig(pos_encoding="sandwich", options={"sandwich_dim": 7})
    with pytest.raises(ValueError, match=r"options.sandwich_dims: no registered component declares it \(did you mean "
                                         r"'sandwich_dim'\?\); encoding 'sandwich' and processor 'none' take: "
                                         r"sandwich_dim"):
        ModelConfig(pos_encoding="sandwich", options={"sandwich_dims": 8})
    # another component's option: not read by this model, so not part of its config (a base may set it for the
    # rows that use the component)
    assert ModelConfig(pos_encoding="kerple", options={"sandwich_dim": 8}).to_dict().get("options") is None


def test_a_near_miss_names_the_known_components():
    with pytest.raises(ValueError, match=r"unknown score processor 'dapv2' \(did you mean 'dapev2'\?\); known: none, "
                                         r"dape, dapev2"):
        ModelConfig(processor="dapv2")
    with pytest.raises(ValueError, match=r"unknown processor form 'no_bias'"):  # internal, not a study's choice
        ModelConfig(form="no_bias")


def test_a_record_missing_a_part_or_taking_a_name_is_refused():
    with pytest.raises(ComponentError, match="'dape' is already registered \\(built-in\\)"):
        processors.add(Processor("dape", "again", lambda cfg, has_bias: None, cost=lambda cfg: Cost()))
    with pytest.raises(ComponentError, match="misses its cost"):
        processors.add(Processor("costless", "x", lambda cfg, has_bias: None))
    with pytest.raises(ComponentError, match="option 'width' misses its type"):
        processors.add(Processor("typeless", "x", lambda cfg, b: None, cost=lambda cfg: Cost(),
                                 settings=(Setting("width"),)))
    assert not {"costless", "typeless"} & set(processors.names())


def test_a_component_reading_a_model_field_that_does_not_exist_is_refused():
    processors.add(Processor("misplaced", "x", lambda cfg, b: None, cost=lambda cfg: Cost(),
                             settings=("no_such_field",)))
    try:
        with pytest.raises(ValueError, match="'misplaced' reads model field 'no_such_field'"):
            ModelConfig(processor="misplaced")
    finally:
        processors.remove("misplaced")


def test_a_processor_that_reads_later_keys_serves_bidirectional_models_only():
    record = processors.add(Processor("two_sided", "two-sided", lambda cfg, has_bias: None, cost=lambda cfg: Cost(),
                                      causal=False))
    try:
        with pytest.raises(ValueError, match="'two_sided' reads later keys .* bidirectional models only"):
            ModelConfig(processor="two_sided")
        assert ModelConfig(processor="two_sided", causal=False).processor_facts is record
    finally:
        processors.remove("two_sided")


def test_the_schema_lists_the_registered_names():
    from orchestrator.study.schema import study_json_schema

    model = study_json_schema()["$defs"]["ModelConfig"]["properties"]
    assert model["processor"]["enum"] == list(processors.names())
    assert model["pos_encoding"]["enum"] == list(encodings.names())
    assert model["form"]["enum"] == [name for name, form in forms.items() if form.choice]



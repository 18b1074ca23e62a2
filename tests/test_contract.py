"""The component contract (dape_core/contract.py): every built-in, contrib and example component passes it;
each check refuses a component built to break it, through `orchestrator validate` (exit 2, the component and
the check named); `model.leak` only on a component that reads it."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import yaml
from cli_support import run_cli
from registry_support import restored_registry

from dape_core import ModelConfig, components, plugins
from dape_core.contract import COST_FACTOR, leak_refusal, measured_macs, refusals, small_config

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@pytest.fixture(autouse=True)
def registry_restored(tmp_path_factory):
    """Each test's plugins leave the registry, the loaded plugins and sys.modules as they were."""
    with restored_registry(tmp_path_factory):
        yield


def _builtin_cases():
    components.discover_contrib()
    cases = [{"pos_encoding": name} for name in components.encodings.names()]  # contrib's sandwich included
    cases += [{"pos_encoding": "kerple", "processor": name} for name in components.processors.names()
              if name != "none"]
    cases += [{"pos_encoding": "alibi", "processor": "dapev2", "form": name}
              for name, form in components.forms.items() if form.choice and name != "concat_residual"]
    cases += [{"pos_encoding": "nope", "processor": "dape"},  # the no_bias form
              {"pos_encoding": "rope", "processor": "dapev2", "kernel_size": (2, 3)},
              {"pos_encoding": "fire", "processor": "dapev2", "kernel_size": (3, 5)},
              {"pos_encoding": "kerple", "processor": "dapev2", "kernel_size": 5, "leak": True},
              {"pos_encoding": "t5", "processor": "dapev2", "kernel_size": 3, "causal": False}]
    return cases


@pytest.mark.parametrize("fields", _builtin_cases(), ids=lambda fields: "-".join(map(str, fields.values())))
def test_every_builtin_component_passes_the_contract(fields):
    assert [str(refusal) for refusal in refusals(ModelConfig(**fields))] == []


def test_the_example_plugin_passes_the_contract():
    plugins.load("kq_conv.py", EXAMPLES)
    for rows, cols in ((1, 1), (2, 3), (3, 5)):
        model = ModelConfig(pos_encoding="kerple", processor="kq_conv", options={"kq_rows": rows, "kq_cols": cols})
        assert [str(refusal) for refusal in refusals(model)] == []


def test_the_leak_flag_is_honoured_only_where_a_component_reads_it():
    assert leak_refusal(ModelConfig(pos_encoding="kerple", processor="dapev2", leak=True)) is None  # DAPE's tril
    refused = leak_refusal(ModelConfig(pos_encoding="kerple", processor="none", leak=True))
    assert refused is not None and refused.check == "leak" and "encoding 'kerple' (built-in)" in refused.component


def test_the_leakage_experiment_is_found_leaking_when_its_flag_is_not_given_the_benefit():
    """With `leak: true` the causality checks are off (the leakage experiment); the same model's leak is found
    when the contract is made to look (a processor that declared no `leak` setting would be)."""
    leaking = ModelConfig(pos_encoding="kerple", processor="dapev2", kernel_size=5, leak=True)
    assert refusals(leaking) == []
    from dape_core import contract

    small = small_config(leaking)
    found = contract._path_problems(contract._random_model(small, 0), contract._tokens(small, 0), causal=True)
    assert any(check == "causality" and "later position" in detail for check, detail in found), found


def test_the_measured_cost_of_dape_is_its_declared_cost():
    declared, measured = measured_macs(small_config(ModelConfig(pos_encoding="alibi", processor="dapev2",
                                                                kernel_size=(2, 3), d_dape=8)))
    assert declared == measured  # two convolutions, counted exactly by torch's flop counter


# Components built to break one check each, as a study's plugin: (plugin source, model settings, the check,
# what the refusal says).
HEADER = """
    import torch
    from torch import nn
    from torch.nn import functional as F
    from dape_core.components import Cost, Processor, Setting, register_processor
    from dape_core.processors.base import ScoreProcessor
"""
ZERO_GATED_PEEK = HEADER + """
    class Peek(ScoreProcessor):
        '''A = S + B + g * (S one key later): row i reads q_i . k_(i+1) through a gate that starts at zero.'''
        key_halo = 1
        def __init__(self):
            super().__init__()
            self.gate = nn.Parameter(torch.zeros(()))
        def forward(self, scores, bias, q_pos, k_pos):
            later = F.pad(scores, (0, 1))[..., 1:]
            return scores + bias + self.gate * later

    register_processor(Processor("broken", "peek", lambda cfg, has_bias: Peek(), cost=lambda cfg: Cost(1, 0)))
"""
SCALE = HEADER + """
    class Scale(ScoreProcessor):
        '''A = S + B + w * S: causal, reads no `leak`.'''
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(()))
        def forward(self, scores, bias, q_pos, k_pos):
            return scores + bias + self.weight * scores

    register_processor(Processor("broken", "scale", lambda cfg, has_bias: Scale(), cost=lambda cfg: Cost({params}, 0)))
"""
KQ = HEADER + """
    class KQ(ScoreProcessor):
        '''A depthwise 2 x 3 convolution of S + B over (queries, keys), padded on the past side of both.'''
        def __init__(self, heads):
            super().__init__()
            self.row_halo = {row_halo}
            self.conv = nn.Conv2d(heads, heads, (2, 3), groups=heads)
        def forward(self, scores, bias, q_pos, k_pos):
            z = scores + bias
            return z + self.conv(F.pad(z, (2, 0, 1, 0)))

    register_processor(Processor("broken", "kq", lambda cfg, has_bias: KQ(cfg.n_head),
                                 cost=lambda cfg: Cost(cfg.n_head * 7, {macs_factor} * cfg.n_head * 6)))
"""
BROKEN = {
    "zero-gated future read": (ZERO_GATED_PEEK, {}, "causality",
                               r"training, direct: the gradient of the logits at positions 0\.\.\d+ with respect "
                               r"to the embedding at the later position \d+ is [\d.e-]+, not 0"),
    "leak on a component that does not read it": (SCALE.format(params=1), {"leak": True}, "leak",
                                                  r"model.leak is true, but no component in use declares the `leak` "
                                                  r"setting"),
    "wrong halo": (KQ.format(row_halo=0, macs_factor=1), {}, "block path",
                   r"training, blocks of 10 rows: the logits differ from the direct path's by up to [\d.e-]+ .*"
                   r"first at position 10: .*also on: evaluation, blocks of 16 rows, evaluation, last 13 rows "
                   r"\(tail\)"),
    "wrong parameter count": (SCALE.format(params=5), {}, "parameters",
                              r"Cost.parameters says 5 per layer, the built module has 1"),
    "cost off by 10x": (KQ.format(row_halo=1, macs_factor=10), {}, "cost",
                        r"Cost.macs says 120 multiply-adds per score-map entry, the forward measures 12 \(10x"),
}


def _study(folder: Path, plugin: str, model: dict) -> Path:
    (folder / "broken.py").write_text(textwrap.dedent(plugin))
    spec = {"name": "contract", "plugins": ["broken.py"],
            "base": {"model": {"preset": "tiny", "pos_encoding": "kerple", "processor": "broken"},
                     "data": {"source": "stdlib", "max_files": 40},
                     "train": {"seq_len": 32, "batch_size": 4, "steps": 4, "device": "cpu"},
                     "eval": {"lengths": [32], "tokens_per_length": 1024}},
            "variants": [{"label": "plain", "baseline": True, "set": {"model.processor": "none"}},
                         {"label": "broken", "set": {f"model.{name}": value for name, value in model.items()}}]}
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize("case", BROKEN)
def test_each_check_refuses_a_component_built_to_break_it(tmp_path, capsys, case):
    plugin, model, check, detail = BROKEN[case]
    code, output = run_cli(capsys, "validate", _study(tmp_path, plugin, model))
    assert code == 2, output
    flat = " ".join(output.split())  # the console wraps long lines
    named = (r"variants\[1\] \(broken\): (model.leak: )?processor 'broken' \(broken\) (over encoding 'kerple' "
             rf"\(built-in\) )?fails the {check} check: ")
    assert re.search(named + detail, flat), flat
    assert "variants[0]" not in flat  # the built-in row passes


def test_a_broken_plugin_is_refused_by_every_command_not_only_validate(tmp_path, capsys):
    """A plugin's components are checked at every loading of the study (plan here), a built-in's at validate."""
    code, output = run_cli(capsys, "plan", _study(tmp_path, SCALE.format(params=5), {}))
    assert code == 2 and "fails the parameters check" in " ".join(output.split()), output


def test_a_study_of_builtins_validates_with_the_contract(tmp_path, capsys):
    code, output = run_cli(capsys, "validate", EXAMPLES / "kq_conv.yaml")
    assert code == 0, output
    assert COST_FACTOR == 2.0  # the factor docs/extending.md states


def test_the_worker_checks_the_contract_with_the_code_it_loaded(tmp_path):
    """The probe a Ray worker runs before the first trial (orchestrator/execution/plugins_on_workers.py), called
    here in-process: it loads the plugin from the payload the driver sends, then refuses the broken config."""
    from orchestrator.execution.plugins_on_workers import _probe

    (tmp_path / "broken.py").write_text(textwrap.dedent(SCALE.format(params=5)))
    payload = plugins.load("broken.py", tmp_path).payload()
    broken = ModelConfig(pos_encoding="kerple", processor="broken").to_dict()
    plain = ModelConfig(pos_encoding="kerple").to_dict()
    problem, refused = _probe([payload], [("variants[1] (broken)", broken), ("variants[0] (plain)", plain)])
    assert problem is None
    assert len(refused) == 1 and refused[0].startswith("variants[1] (broken): processor 'broken' (broken) fails "
                                                        "the parameters check: Cost.parameters says 5"), refused


def test_a_pass_is_remembered_for_the_same_code_and_a_change_is_checked_again(tmp_path, capsys, monkeypatch):
    """validate remembers the configs the contract passed, by code and config (contract_checks.Passed): the next
    validate of the unchanged study builds no model (its plugin imports torch itself); the plugin changed to
    break a check is checked again and refused."""
    import os
    import subprocess
    import sys

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    study = _study(tmp_path, SCALE.format(params=1), {})
    code, output = run_cli(capsys, "validate", study)
    assert code == 0, output
    probe = ("import sys\nfrom orchestrator.cli import main\nsys.argv = ['orchestrator', 'validate', sys.argv[1]]\n"
             "try:\n    main()\nexcept SystemExit as stop:\n    code = stop.code\nelse:\n    code = 0\n"
             "print('exit', code, 'built', 'dape_core.model' in sys.modules)")
    again = subprocess.run([sys.executable, "-c", probe, str(study)], capture_output=True, text=True, timeout=300,
                           env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}, cwd=tmp_path)
    assert again.stdout.strip().splitlines()[-1] == "exit 0 built False", again.stdout + again.stderr
    (tmp_path / "broken.py").write_text(textwrap.dedent(SCALE.format(params=5)))  # the same name, now wrong
    code, output = run_cli(capsys, "validate", study)
    assert code == 2 and "fails the parameters check" in " ".join(output.split()), output
    monkeypatch.setenv("DAPE_CONTRACT_CACHE", "off")  # and with the memory off, the passing plugin is checked
    (tmp_path / "broken.py").write_text(textwrap.dedent(SCALE.format(params=1)))
    assert run_cli(capsys, "validate", study)[0] == 0

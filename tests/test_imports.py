"""Each command imports what it needs when it needs it: dape_core's config sections load without torch (a study
file is validated at once), and its public names are all still there, loaded on first use."""

import subprocess
import sys

import pytest


def _loaded(code: str, watched: tuple[str, ...] = ("torch", "mlflow", "ray", "pandas", "matplotlib")) -> str:
    probe = f"import sys\n{code}\nprint(sorted(m for m in {watched!r} if m in sys.modules))"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                          check=True).stdout.strip().splitlines()[-1]


def test_config_sections_load_without_torch():
    code = ("from dape_core import CheConfig, DataConfig, EvalConfig, ExperimentConfig, ModelConfig, TrainConfig, "
            "PRESETS\n"
            "cfg = ExperimentConfig(model={'preset': 'tiny', 'pos_encoding': 'rope_random'}, train={'seq_len': 32},\n"
            "                       eval={'lengths': [32, 64, 128]})\n"
            "assert cfg.model.train_length == 32 and cfg.model.rope_random_max == 128\n"
            "ExperimentConfig(che={'task': 'parity_check'})")
    assert _loaded(code) == "[]"


def test_validating_a_study_loads_neither_torch_nor_mlflow():
    code = "from orchestrator import load_study, expand\nexpand(load_study('studies/position_encoding.yaml'))"
    assert _loaded(code) == "[]"


def test_the_public_api_is_unchanged():
    import dape_core
    import dape_core.data
    import dape_core.evaluate
    import dape_core.train

    for package in (dape_core, dape_core.train, dape_core.data, dape_core.evaluate):
        for name in package.__all__:
            assert getattr(package, name) is not None, (package.__name__, name)
        assert set(package.__all__) <= set(dir(package))
    from dape_core import CheConfig
    from dape_core.che.experiment import CheConfig as FromItsOldHome

    assert CheConfig is FromItsOldHome
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        dape_core.nothing  # noqa: B018


def test_the_driver_of_a_run_loads_no_torch():
    # Only the trials' processes train: the driver imports the trial function for Ray Tune, not the training code
    # (seconds at every `orchestrator run`). Tune's TensorBoard logger, which imports torch, is switched off at fit.
    code = "import orchestrator.execution.runner, orchestrator.execution.ray_tune, orchestrator.execution.local"
    loaded = _loaded(code)
    assert "torch" not in loaded and "ray" in loaded, loaded
    # Ray where trials run, MLflow at the first write, matplotlib at the first figure: a finished study run again
    # loads none of them (tests/test_rerun.py runs one).
    loaded = _loaded("import orchestrator.run, orchestrator.decide_loop, orchestrator.commands.running")
    assert not {"torch", "ray", "mlflow", "matplotlib"} & set(eval(loaded)), loaded


def test_building_and_running_a_model_does_not_load_dynamo():
    # torch._dynamo costs seconds to import: only torch.compile, AdamW or the fused path's first call need it.
    code = ("import torch\nfrom dape_core import ModelConfig, build_model\n"
            "model = build_model(ModelConfig(preset='tiny', processor='dapev2', kernel_size=3))\n"
            "model(torch.zeros(1, 8, dtype=torch.long))")
    assert _loaded(code, ("torch", "torch._dynamo")) == "['torch']"


def test_the_driver_of_an_evaluation_loads_no_torch():
    # `orchestrator evaluate` on Ray: the driver plans, checks memory and logs; only the Ray tasks load the models.
    code = ("import orchestrator.evaluation.runner\nfrom dape_core import ModelConfig\n"
            "from orchestrator.planning.estimate import evaluation_memory_bytes\n"
            "evaluation_memory_bytes(ModelConfig(preset='tiny', processor='dapev2'), 8, 4096)")
    assert "torch" not in _loaded(code)


def test_the_documented_component_imports():
    # docs/extending.md's imports, which plugins written against it use: the packages load without torch, and the
    # classes a component derives from are imported from them on first use (with torch).
    code = ("import dape_core.encodings, dape_core.processors\n"
            "from dape_core.components import (Cost, Encoding, Form, Processor, Setting, register_encoding,\n"
            "                                  register_form, register_processor, registering_for)")
    assert _loaded(code) == "[]"
    from dape_core.encodings import PositionEncoding
    from dape_core.encodings.base import PositionEncoding as FromBase
    from dape_core.processors import ScoreProcessor
    from dape_core.processors.base import ScoreProcessor as FromItsBase

    assert PositionEncoding is FromBase and ScoreProcessor is FromItsBase

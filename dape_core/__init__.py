"""dape_core: a causal LM with the position encodings and attention-score processors of DAPE and DAPE V2.

    from dape_core import ModelConfig, build_model
    model = build_model(ModelConfig(preset="tiny", pos_encoding="kerple", processor="dapev2", kernel_size=3))
    logits = model(tokens)  # [B, T] -> [B, T, vocab]

The names below are imported on first use: the config sections (ModelConfig, DataConfig, TrainConfig,
EvalConfig, CheConfig, ExperimentConfig) load without torch, so that a study file is validated at once;
the model, the data pipeline and the trainer load torch when first asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy import lazy_attributes

_PUBLIC = {
    "PRESETS": "config", "ModelConfig": "config", "build_model": "model", "CausalLM": "model",
    "DataConfig": "data.config", "load_corpus": "data", "EvalConfig": "evaluate.config",
    "perplexity_by_length": "evaluate", "TrainConfig": "train.config", "NonFiniteLossError": "train",
    "ExperimentConfig": "experiment_config", "ExperimentResult": "experiment", "run_experiment": "experiment",
    "CheConfig": "che.config", "CheResult": "che.experiment", "run_che": "che.experiment",
    "load_model": "stored", "save_model": "stored", "WeightsUnreadable": "stored", "WeightsChanged": "stored",
}
__all__ = list(_PUBLIC)

if TYPE_CHECKING:
    from .che.config import CheConfig
    from .che.experiment import CheResult, run_che
    from .config import PRESETS, ModelConfig
    from .data import load_corpus
    from .data.config import DataConfig
    from .evaluate import perplexity_by_length
    from .evaluate.config import EvalConfig
    from .experiment import ExperimentResult, run_experiment
    from .experiment_config import ExperimentConfig
    from .model import CausalLM, build_model
    from .stored import WeightsChanged, WeightsUnreadable, load_model, save_model
    from .train import NonFiniteLossError
    from .train.config import TrainConfig


__getattr__, __dir__ = lazy_attributes(__name__, _PUBLIC)

"""dape_core: a causal LM with the position encodings and attention-score processors of DAPE and DAPE V2.

    from dape_core import ModelConfig, build_model
    model = build_model(ModelConfig(preset="tiny", pos_encoding="kerple", processor="dapev2", kernel_size=3))
    logits = model(tokens)  # [B, T] -> [B, T, vocab]
"""

from .che.experiment import CheConfig, CheResult, run_che
from .config import PRESETS, ModelConfig
from .data import DataConfig, load_corpus
from .evaluate import EvalConfig, perplexity_by_length
from .experiment import ExperimentConfig, ExperimentResult, run_experiment
from .model import CausalLM, build_model
from .train import NonFiniteLossError, TrainConfig

__all__ = [
    "PRESETS", "ModelConfig", "build_model", "CausalLM", "DataConfig", "load_corpus", "EvalConfig",
    "perplexity_by_length", "TrainConfig", "NonFiniteLossError", "ExperimentConfig", "ExperimentResult",
    "run_experiment", "CheConfig", "CheResult", "run_che",
]

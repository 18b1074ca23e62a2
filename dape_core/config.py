"""Model configuration: one validated dataclass, sizes taken from a named preset.

`ModelConfig` is a pydantic dataclass so that the same object validates a study file's `model:` section
(unknown keys and bad values are reported with their field names) and is built directly from Python.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Literal

from pydantic import ConfigDict, field_validator, model_validator
from pydantic.dataclasses import dataclass

# name -> (layers, width, heads). Paper sizes from SPEC §5; CPU presets are this project's.
PRESETS: dict[str, tuple[int, int, int]] = {
    "tiny": (2, 64, 2),  # unit tests: trains in seconds
    "small": (4, 128, 4),  # CPU studies (SPEC §6 "a CPU scale that shows the effect")
    "medium": (6, 192, 6),  # CPU model-size ladder
    "125M": (12, 768, 12),
    "350M": (24, 1024, 16),
    "2.7B": (32, 2560, 32),
    "6.7B": (32, 4096, 32),
}

POS_ENCODINGS = ("nope", "rope", "alibi", "kerple")
ROTARY_OR_NONE = ("nope", "rope")  # encodings without an additive bias: the processor sees S alone
PROCESSORS = ("none", "dape", "dapev2")
FORMS = ("concat_residual", "concat", "add_residual", "bias_only")


@dataclass(config=ConfigDict(extra="forbid"))
class ModelConfig:
    """Shape and attention recipe of a causal LM.

    preset: a key of PRESETS; `n_layer`, `d_model`, `n_head` override it when given.
    pos_encoding: position encoding of SPEC §2.
    processor: `none`, `dape` (MLP across heads = 1x1 conv) or `dapev2` (1xk conv along keys).
    kernel_size: odd k of the DAPE V2 kernel; `dape` always uses 1.
    d_dape: hidden channels D of the processor.
    form: output form of SPEC §3 (main method `concat_residual`: A = S + B + f([S, B])).
    leak: drop the `tril` before the processor (the paper's information-leakage experiment).
    """

    preset: str = "small"
    vocab_size: int = 256
    pos_encoding: str = "kerple"
    processor: str = "none"
    kernel_size: int = 3
    d_dape: int = 32
    form: Literal["concat_residual", "concat", "add_residual", "bias_only"] = "concat_residual"
    leak: bool = False
    n_layer: int | None = None
    d_model: int | None = None
    n_head: int | None = None
    mlp_ratio: int = 4

    @field_validator("preset")
    @classmethod
    def _known_preset(cls, value: str) -> str:
        if value not in PRESETS:
            raise ValueError(f"unknown preset {value!r}; valid presets: {', '.join(PRESETS)}")
        return value

    @field_validator("pos_encoding")
    @classmethod
    def _known_encoding(cls, value: str) -> str:
        if value not in POS_ENCODINGS:
            raise ValueError(f"unknown position encoding {value!r}; valid: {', '.join(POS_ENCODINGS)}")
        return value

    @field_validator("processor")
    @classmethod
    def _known_processor(cls, value: str) -> str:
        if value not in PROCESSORS:
            raise ValueError(f"unknown processor {value!r}; valid: {', '.join(PROCESSORS)}")
        return value

    @field_validator("kernel_size")
    @classmethod
    def _odd_kernel(cls, value: int) -> int:
        if value < 1 or value % 2 == 0:
            raise ValueError(f"kernel size must be an odd integer >= 1 (got {value}): a centred 1xk kernel needs odd k")
        return value

    @field_validator("d_dape", "vocab_size", "mlp_ratio")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"must be a positive integer (got {value})")
        return value

    @model_validator(mode="after")
    def _fill_from_preset(self) -> "ModelConfig":
        layers, width, heads = PRESETS[self.preset]
        self.n_layer = self.n_layer or layers
        self.d_model = self.d_model or width
        self.n_head = self.n_head or heads
        if self.processor != "none" and self.form == "bias_only" and self.pos_encoding in ROTARY_OR_NONE:
            raise ValueError(f"form 'bias_only' needs a position encoding with a bias; {self.pos_encoding!r} has none")
        if self.d_model % self.n_head:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_head {self.n_head}")
        return self

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    @property
    def effective_kernel_size(self) -> int:
        """DAPE v1 is the 1x1 case of DAPE V2 (SPEC §4: k = 1 is exactly DAPE v1)."""
        return 1 if self.processor == "dape" else self.kernel_size

    def to_dict(self) -> dict:
        return asdict(self)

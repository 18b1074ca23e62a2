"""Model configuration: one validated dataclass, sizes taken from a named preset.

`ModelConfig` is a pydantic dataclass so that the same object validates a study file's `model:` section
(unknown keys and bad values are reported with their field names) and is built directly from Python.
`ModelConfig.num_parameters()` is the analytic parameter count; `CausalLM.num_parameters()` counts the built
model, and the tests check that the two agree.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic.dataclasses import dataclass

from . import components
from .encodings import BUILTIN_ENCODINGS, ENCODINGS, FIRE_DEFAULT_WIDTH
from .processors import FORMS, PROCESSORS, processor_form, processor_in_channels
from .registry import Encoding, Form, Processor, Registry
from .types import PositiveInt, StrictBool

# name -> (layers, width, heads). Paper sizes from docs/method.md §5 (head dims 64, 64, 80, 128 follow from
# width / heads); the CPU presets are this project's.
PRESETS: dict[str, tuple[int, int, int]] = {
    "tiny": (2, 64, 2),  # unit tests: trains in seconds
    "small": (4, 128, 4),  # CPU studies (docs/method.md §9, a CPU scale that shows the effect)
    "medium": (6, 192, 6),  # CPU model-size ladder
    "125M": (12, 768, 12),
    "350M": (24, 1024, 16),
    "2.7B": (32, 2560, 32),
    "6.7B": (32, 4096, 32),
}

Preset = Literal["tiny", "small", "medium", "125M", "350M", "2.7B", "6.7B"]


class _Named:
    """A `model:` field that names a registered component (dape_core/components.py): checked against the
    registry when validated, so that a plugin's names are valid once its module is loaded, with a "did you
    mean" for a near miss; the JSON Schema lists the names registered when it is generated."""

    def __init__(self, registry: Registry, choices=lambda record: True):
        self.registry, self.choices = registry, choices

    def names(self) -> tuple[str, ...]:
        return tuple(name for name in components.names(self.registry) if self.choices(self.registry[name]))

    def __call__(self, value: str) -> str:
        record = components.find(self.registry, value)
        if record is None or not self.choices(record):
            raise ValueError(self.registry.unknown(value, self.names()))
        return value

    def __get_pydantic_json_schema__(self, core_schema, handler):
        schema = handler(core_schema)
        schema["enum"] = list(self.names())
        return schema


_ENCODING, _PROCESSOR = _Named(ENCODINGS), _Named(PROCESSORS)
_FORM = _Named(FORMS, lambda form: form.choice)
PosEncoding = Annotated[str, AfterValidator(_ENCODING), _ENCODING]  # a name of the registry's encodings
ProcessorName = Annotated[str, AfterValidator(_PROCESSOR), _PROCESSOR]
FormName = Annotated[str, AfterValidator(_FORM), _FORM]

POS_ENCODINGS = BUILTIN_ENCODINGS  # dape_core/encodings/'s (contrib's and plugins' are in the registry too)
BIAS_ENCODINGS = tuple(name for name in BUILTIN_ENCODINGS if ENCODINGS[name].has_bias)  # additive B: [H, T_q, T_k]
# The forms whose processor reads [S, B] (2H input channels) where there is a bias; every other one reads H.
CONCATENATING_FORMS = tuple(name for name, form in FORMS.items() if form.channels == 2)
__all__ = ["PRESETS", "ModelConfig", "effective_model_fields", "processor_form", "processor_in_channels"]


def _odd(value: int) -> int:
    if value % 2 == 0:
        raise ValueError(f"kernel size must be odd along the keys (got {value}): a centred 1xk kernel needs odd k")
    return value


OddInt = Annotated[PositiveInt, AfterValidator(_odd)]
# An odd k (a 1xk kernel), or a pair (kq, kk). The discriminator picks the form from the input, so that an
# error reports that form's problem only (at `kernel_size.k` or `kernel_size.(kq, kk).<index>`).
KernelSize = Annotated[
    Union[Annotated[OddInt, Tag("k")], Annotated[tuple[PositiveInt, OddInt], Tag("(kq, kk)")]],
    Discriminator(lambda value: "(kq, kk)" if isinstance(value, (list, tuple)) else "k"),
]

# The block path's sizes (attention.py), here so that memory estimates read them without loading torch:
# evaluation blocks hold at most this many score entries per batch (times ~100 floats of maps per entry).
EVAL_BLOCK_ELEMENTS = 2**22
MIN_BLOCK_ROWS = 16
DEFAULT_TRAIN_LENGTH = 512  # the paper's main training length: a model built on its own


@dataclass(config=ConfigDict(extra="forbid"))
class ModelConfig:
    """Shape and attention recipe of a causal LM.

    preset: a key of PRESETS; `n_layer`, `d_model`, `n_head` override it when given.
    pos_encoding: position encoding: one of docs/method.md §2 (POS_ENCODINGS), or a name that dape_core/contrib/
        or a study's plugin registers (dape_core/components.py; docs/extending.md).
    processor: `none`, `dape` (MLP across heads = 1x1 conv) or `dapev2` (1xk conv along keys), or a name that
        contrib or a plugin registers.
    kernel_size: DAPE V2 kernel: an odd k (a 1xk kernel along the key axis) or a pair (kq, kk) with kk odd:
        kq query rows, padded on the past side only so that the kernel stays causal (no published method
        has kq > 1). `dape` always uses 1x1.
    d_dape: hidden channels D of the processor.
    form: output form of docs/method.md §3 (main method `concat_residual`: A = S + B + f([S, B])).
    leak: drop the `tril` before the processor (the paper's information-leakage experiment); off by default.
        It is a config field, so a run records it with its params.
    train_length: the training length L_train. YaRN scales by s = L_eval / L_train, FIRE's L₀ and randomized
        RoPE's L_max default to it (see below). In an experiment (`ExperimentConfig`) it is always the length
        the model trains at (`train.seq_len`, or a CHE task's longest training sequence), whatever is given;
        512 (the paper's main training length) when a model is built on its own.
    rope_random_max: L_max of randomized RoPE (training positions are a sorted sample from [0, L_max)).
        Decision D6: a parameter, default the largest evaluation length, which an experiment fills in; a
        model alone does not know its evaluation lengths, so there None means 8 x train_length.
    fire_width: FIRE's MLP width W. Decision D8: FIRE's own width (default 32), independent of d_dape.
    fire_l0: FIRE's L₀. Decision D9: None means train_length (an experiment fills it in).
    attention_block_size: with a processor, training computes attention in blocks of this many query rows,
        each recomputed in backward (torch.utils.checkpoint), so only q, k, v are kept per layer instead of
        the [B, 2H, T, T] and [B, D, T, T] maps, and the upper triangle is skipped (on this project's CPU a
        125M-shaped layer's training step at T = 1024 with 64 rows takes about 0.3x the time of the reference
        formulation: tests/benchmarks/bench_attention.py). None trains on the direct path (the reference
        formulation over the full map). Both give the same logits and gradients. Without a processor,
        training always uses PyTorch's fused kernel. On CUDA the fused Triton path takes precedence where it
        applies (dape_core/attention.py), and blocks take their rows from a memory budget instead.
    causal: True (default) for the causal LM. False builds a bidirectional encoder (the CHE protocol,
        docs/method.md §7):
        no causal mask, every query attends to all keys, position biases are taken at the symmetric distance
        Δ = |i − j| (instead of i − j clamped at 0), and the processor runs without its `tril` (a bidirectional
        model may read both sides, so there is nothing to leak). A kernel taller than one query row is still
        padded on the past side only.
    options: the settings of their own that the position encoding and the score processor in use declare
        (contrib and plugin components: dape_core/components.py `Setting`), by name; checked against their
        types, the missing ones filled in with their defaults; another registered component's options are
        dropped (not read here). Empty for the components of docs/method.md.
    eval_block_size: without gradients (evaluation) the block path is used automatically once T exceeds
        this many rows; each block then holds at most this many rows and about 2^22 score entries per
        batch (a few hundred MB), so long evaluation fits in memory. None always evaluates on the direct path.
    """

    preset: Preset = "small"
    vocab_size: PositiveInt = 256
    pos_encoding: PosEncoding = "kerple"
    processor: ProcessorName = "none"
    kernel_size: KernelSize = 3
    d_dape: PositiveInt = 32
    form: FormName = "concat_residual"
    leak: StrictBool = False
    causal: StrictBool = True
    if TYPE_CHECKING:  # what a validated config holds: `_fill_from_preset` fills the sizes a study leaves out
        n_layer: int = 0
        d_model: int = 0
        n_head: int = 0
    else:  # what a study may give: a size, or none for the preset's
        n_layer: PositiveInt | None = None
        d_model: PositiveInt | None = None
        n_head: PositiveInt | None = None
    mlp_ratio: PositiveInt = 4
    train_length: PositiveInt = DEFAULT_TRAIN_LENGTH
    rope_random_max: PositiveInt | None = None
    fire_width: PositiveInt = FIRE_DEFAULT_WIDTH
    fire_l0: PositiveInt | None = None
    attention_block_size: PositiveInt | None = None
    eval_block_size: PositiveInt | None = 128
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _fill_from_preset(self) -> "ModelConfig":
        layers, width, heads = PRESETS[self.preset]
        self.n_layer = self.n_layer or layers
        self.d_model = self.d_model or width
        self.n_head = self.n_head or heads
        if self.causal and not self.processor_facts.causal:
            raise ValueError(f"processor {self.processor!r} reads later keys (its record is not causal): it serves "
                             "bidirectional models only (causal: false)")
        if self.processor_facts.present and FORMS[self.form].needs_bias and not self.has_bias:
            raise ValueError(f"form {self.form!r} needs a position encoding with a bias; "
                             f"{self.pos_encoding!r} has none")
        for record in (self.encoding, self.processor_facts):
            missing = [name for name in record.fields if name not in self.__dataclass_fields__]
            if missing:
                raise ValueError(f"{record.name!r} reads model field {missing[0]!r}, which ModelConfig does not have: "
                                 "declare it as an option of its own (Setting(name, type, default))")
        self.options = self._checked_options()
        if self.d_model % self.n_head:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_head {self.n_head}")
        if self.encoding.rotary and self.head_dim % 2:
            raise ValueError(f"rotary encodings need an even head dim (d_model / n_head = {self.head_dim})")
        if self.rope_random_max is not None and self.rope_random_max < self.train_length:
            raise ValueError(f"rope_random_max={self.rope_random_max} is below the training length "
                             f"{self.train_length} (train_length; in an experiment, train.seq_len): randomized "
                             "RoPE samples that many positions from [0, rope_random_max)")
        return self

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    def _checked_options(self) -> dict[str, Any]:
        """`options`: the settings of their own that the encoding and the processor in use declare
        (dape_core/components.py `Setting`), each checked against its type, the missing ones at their defaults.
        An option of another registered component is dropped (a study's base may set a plugin's option for the
        rows that use it; the others do not read it, like `kernel_size` without a processor); one that no
        registered component declares is an error."""
        declared = {setting.name: (setting, record) for record in (self.encoding, self.processor_facts)
                    for setting in record.options}
        if not self.options and not declared:  # (the registry is not listed: that would import contrib)
            return {}
        components.discover_contrib()
        known = {setting.name for registry in (components.encodings, components.processors)
                 for record in registry.values() for setting in record.options}
        unknown = sorted(set(self.options) - known)
        if unknown:
            close = difflib.get_close_matches(unknown[0], sorted(known), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            offered = ", ".join(declared) or "none"
            raise ValueError(f"options.{unknown[0]}: no registered component declares it{hint}; encoding "
                             f"{self.pos_encoding!r} and processor {self.processor!r} take: {offered}")
        checked = {}
        for name, (setting, record) in declared.items():
            if name not in self.options:
                checked[name] = setting.default
                continue
            try:
                checked[name] = TypeAdapter(setting.type).validate_python(self.options[name], strict=True)
            except ValidationError as error:
                problem = error.errors()[0]["msg"].removeprefix("Value error, ")
                raise ValueError(f"options.{name} ({record.name}'s): {problem}") from None
        return checked

    def option(self, name: str) -> Any:
        """The value of an option (`model.options.<name>`, its declared default when not given)."""
        return self.options[name]

    @property
    def encoding(self) -> Encoding:
        """What the position encoding is (its record: dape_core/encodings/ or a contrib/plugin module)."""
        return ENCODINGS[self.pos_encoding]

    @property
    def processor_facts(self) -> Processor:
        """What the score processor is (its record: dape_core/processors/ or a contrib/plugin module)."""
        return PROCESSORS[self.processor]

    @property
    def form_facts(self) -> Form:
        """The form the processor computes (`no_bias` without a bias encoding)."""
        return FORMS[processor_form(self.form, self.has_bias)]

    @property
    def has_bias(self) -> bool:
        return self.encoding.has_bias

    @property
    def processor_in_channels(self) -> int:
        return processor_in_channels(self.n_head, self.has_bias, self.form)

    @property
    def kernel_shape(self) -> tuple[int, int] | None:
        """(query rows, key columns) of a convolutional processor's kernel (DAPE v1 is the 1x1 case,
        docs/method.md §4); None for a processor without one."""
        kernel = self.processor_facts.kernel
        return kernel(self) if kernel is not None else None

    @property
    def random_positions_max(self) -> int:
        return self.rope_random_max or 8 * self.train_length

    @property
    def fire_threshold(self) -> int:
        return self.fire_l0 or self.train_length

    def num_parameters(self) -> int:
        """Analytic parameter count of `build_model(self)`, written out from the architecture (not from the
        modules), so that a test comparing it with the built model checks both."""
        width, layers = self.d_model, self.n_layer
        hidden = self.mlp_ratio * width
        per_layer = (
            2 * width  # ln_attn
            + width * 3 * width + 3 * width  # qkv
            + width * width + width  # proj
            + 2 * width  # ln_mlp
            + width * hidden + hidden + hidden * width + width  # MLP
            + (0 if self.encoding.shared else self.encoding.learned(self))
            + self._processor_parameters()
        )
        shared = self.encoding.learned(self) if self.encoding.shared else 0  # one module for all layers (T5's table)
        return self.vocab_size * width + layers * per_layer + shared + 2 * width + width * self.vocab_size

    def _processor_parameters(self) -> int:
        return self.processor_facts.cost(self).parameters

    def to_dict(self) -> dict:
        """The fields as a plain dict; `options` only where a component declares some, so that the configs
        (and identities) of the runs made before options existed stay what they were."""
        fields = asdict(self)
        if not fields["options"]:
            del fields["options"]
        return fields


def effective_model_fields(fields: dict, train_length: int, longest: int) -> dict:
    """The `model:` fields an experiment fixes, so that its config says what the model is built with:
    train_length is the length it trains at; randomized RoPE's L_max, when not given, is the longest length
    the model will read (Decision D6: the largest evaluation length); FIRE's L₀, when not given, is the
    training length. Fields an encoding does not use stay as given."""
    fields = {**fields, "train_length": train_length}
    encoding = ENCODINGS.get(fields.get("pos_encoding"))  # None for an invalid one: the model check's to report
    for setting, source in (encoding.defaults.items() if encoding is not None else ()):
        if fields.get(setting) is None:
            fields[setting] = longest if source == "longest" else train_length
    return fields

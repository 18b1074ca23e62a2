"""The registry of an attention layer's components: the records that say everything the other floors need of a
position encoding, a score processor or a processor form (`Encoding`, `Processor`, `Form`, their `Setting`s and
`Cost`), and three plain mappings of them by name. It imports nothing of dape_core and no torch: validating a
study reads it.

Who fills it: each built-in component's own file registers its record (`dape_core/encodings/`,
`dape_core/processors/`); `dape_core/components.py`, the public face plugins import, loads those and discovers
`dape_core/contrib/`; a study's plugin (`dape_core/plugins.py`) registers inside `registering_for(module)`, so
that its records name it as their owner and `forget(module)` removes them. Nothing else changes this module's
state: every change goes through the functions below.
"""
from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar

__all__ = [
    "ComponentError",
    "Cost",
    "Encoding",
    "Form",
    "LayerConfig",
    "Processor",
    "Setting",
    "encodings",
    "forms",
    "processors",
    "register_encoding",
    "register_form",
    "register_processor",
    "registering_for",
]


class ComponentError(ValueError):
    """A record that cannot be registered: a name taken, a required part missing."""


@dataclass(frozen=True)
class Setting:
    """One setting a component reads. `field`: a ModelConfig field (`model.kernel_size`, the names studies and
    stored runs used before options existed: DAPE's and the built-in encodings'; a name given alone in a
    record's `settings` is one); otherwise an option of the component's own, given as `model.options.<name>`,
    whose `type` (anything pydantic validates: int, float, Literal[...], an Annotated constraint) and `default`
    the record declares. `label`: in reports.
    `step_cost`: whether its value changes the cost of a training step (runs are matched on it to learn the
    duration of a planned trial: orchestrator/planning/learned.py)."""

    name: str
    type: Any = None
    default: Any = None
    label: str | None = None
    step_cost: bool = True
    field: bool = False


@dataclass(frozen=True)
class Cost:
    """What a component costs per entry (i, j) of a layer's score map, per sequence: `macs` multiply-adds in
    the forward pass, `stored` floats kept for the backward pass (and held while evaluating), `working` floats
    a training block computes and holds the gradients of (the CUDA block budget, attention.py). `parameters`:
    per layer."""

    parameters: int = 0
    macs: float = 0
    stored: float = 0
    working: float = 0


class LayerConfig(Protocol):
    """What a component's builder is given: the model's settings (dape_core.config.ModelConfig satisfies it). The
    builders here and in `encodings/base.py`, `processors/base.py` name this, not the config's class, so that
    the components need not import the config that imports them."""

    n_layer: int
    causal: bool

    @property
    def encoding(self) -> Encoding: ...

    @property
    def processor_facts(self) -> Processor: ...

    def to_dict(self) -> dict: ...


NO_COST = Cost()


def _no_cost(cfg) -> Cost:
    return NO_COST


def _no_parameters(cfg) -> int:
    return 0


def _nothing_unread(cfg) -> set[str]:
    return set()


def _settings(values) -> tuple[Setting, ...]:
    return tuple(value if isinstance(value, Setting) else Setting(value, field=True) for value in values)


class _ByName:
    """A registered record travels by its name: pickled (`torch.save(model)`, `ray.put`, a spawned worker: a
    built module keeps its record as `facts`) as a reference to the record registered under that name, which
    the process that unpickles it has registered too (importing the module's class registers a built-in's or
    contrib's; a plugin is loaded there first, as a trial's process does). A record that is not the one
    registered under its name is pickled whole. Copying gives the record itself: it describes a component and
    does not change."""

    name: str
    _registry: ClassVar[str]  # its registry's key in `_REGISTRIES`

    def __reduce_ex__(self, protocol):
        if _REGISTRIES[self._registry].get(self.name) is self:
            return registered, (self._registry, self.name)
        return super().__reduce_ex__(protocol)

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


class _Described(_ByName):
    """What encodings and processors share: their settings as names and as records, and their options."""

    declared: tuple[Setting, ...]

    @property
    def settings(self) -> tuple[str, ...]:
        """The names of every setting it reads (fields and options)."""
        return tuple(setting.name for setting in self.declared)

    @property
    def options(self) -> tuple[Setting, ...]:
        """The settings of its own, given under `model.options`."""
        return tuple(setting for setting in self.declared if not setting.field)

    @property
    def fields(self) -> tuple[str, ...]:
        """The ModelConfig fields it reads (`kernel_size`, ...)."""
        return tuple(setting.name for setting in self.declared if setting.field)


class Encoding(_Described):
    """A position encoding.

    kind: `rotary` transforms q and k before `Q Kᵀ` (the module's `rotate` hook), `bias` adds B = [H, T_q, T_k]
        (the `bias` hook), `none` neither.
    build: `ModelConfig -> PositionEncoding` (dape_core.encodings.base's class), one layer's module.
    toeplitz: its bias depends on the distance Δ alone, so the fused kernels read it from a table of Δ (the
        fused path takes every encoding but a bias of more than Δ: FIRE's).
    settings: the `model:` fields only this encoding reads (marked not applicable for the others), or Setting
        records of its options.
    defaults: of its fields, the ones an experiment fills in when not given: field -> `longest` (the largest
        evaluation length) or `train_length`.
    learned: its learned parameters, of one module (`ModelConfig` -> count).
    shared: one module for all layers (else one per layer, each with its own parameters).
    cost: per score-map entry (`ModelConfig -> Cost`; its parameters are `learned`'s), for the plan.
    """

    _registry = "encoding"

    def __init__(self, name: str, label: str, kind: Literal["none", "rotary", "bias"],
                 build: Callable[..., Any] | None = None, *, toeplitz: bool = False, settings=(),
                 defaults: dict[str, Literal["longest", "train_length"]] | None = None,
                 learned: Callable[..., int] | None = None, shared: bool = False,
                 cost: Callable[..., Cost] | None = None):
        self.name, self.label, self.kind, self.build = name, label, kind, build
        self.toeplitz, self.shared = toeplitz, shared
        self.declared = _settings(settings)
        self.defaults = dict(defaults or {})
        self.learned = learned or _no_parameters
        self.cost = cost or _no_cost
        self.owner = "built-in"  # or the plugin module that registered it

    def __repr__(self) -> str:
        return f"Encoding({self.name!r}, {self.kind!r}, owner={self.owner!r})"

    @property
    def has_bias(self) -> bool:
        return self.kind == "bias"

    @property
    def rotary(self) -> bool:
        return self.kind == "rotary"

    @property
    def fused(self) -> bool:
        """The fused attention kernels (`dape_core.fused`) can compute a layer with this encoding."""
        return not self.has_bias or self.toeplitz

    def check(self) -> None:
        if self.kind not in ("none", "rotary", "bias"):
            raise ComponentError(f"encoding {self.name!r}: kind {self.kind!r} is not one of none, rotary, bias")
        if not callable(self.build):
            raise ComponentError(f"encoding {self.name!r} misses its builder (build: ModelConfig -> PositionEncoding)")
        _check_common(self, "encoding")


@dataclass(frozen=True)
class Form(_ByName):
    """How a score processor's output combines with S and B (docs/method.md §3).

    parts: `(S, B) -> [tensors]`, the processor's input channels z, concatenated over the head axis.
    channels: input channels per head (2 where z is [S, B]).
    adds_bias: the logits are S + B + f(z) (else S + f(z)).
    needs_bias: only with a bias encoding.
    fused_mode: how the fused kernels build z (their Z_MODE), None where they do not take this form.
    choice: a study may name it (`no_bias`, what every form becomes without a bias encoding, is not one).
    """

    name: str
    label: str
    parts: Callable[..., list] | None = None
    channels: int = 1
    adds_bias: bool = True
    needs_bias: bool = False
    fused_mode: int | None = None
    choice: bool = True
    owner: str = "built-in"
    _registry: ClassVar[str] = "form"

    def check(self) -> None:
        if not callable(self.parts):
            raise ComponentError(f"form {self.name!r} misses its parts ((S, B) -> list of tensors)")
        if not isinstance(self.channels, int) or self.channels < 1:
            raise ComponentError(f"form {self.name!r}: channels must be a positive int (got {self.channels!r})")
        _check_label(self, "form")


class Processor(_Described):
    """A score processor (docs/method.md §3–§4): logits A from the scores S and the bias B.

    build: `(ModelConfig, has_bias) -> ScoreProcessor` (dape_core.processors), None for `none` (no processor).
    cost: `ModelConfig -> Cost` per layer and score-map entry.
    settings: the ModelConfig fields it reads (`Setting(name, field=True)`, or the name alone), or Setting
        records of its options.
    unread: `ModelConfig -> set of setting names` it holds but does not read in that config (the DAPE form
        without a bias encoding).
    kernel: `ModelConfig -> (query rows, key columns)` of a convolutional processor, None otherwise.
    fused: the fused Triton kernels compute it (a convolution of the DAPE family).
    causal: its row i reads no score of a later key unless `model.leak` is on (contract.py checks it); False: it
        reads later keys by design, so a model may use it only as a bidirectional encoder (`causal: false`).
    """

    _registry = "processor"

    def __init__(self, name: str, label: str, build: Callable[..., Any] | None = None, *,
                 cost: Callable[..., Cost] | None = None, settings=(), unread: Callable[..., set] | None = None,
                 kernel: Callable[..., tuple[int, int]] | None = None, fused: bool = False, causal: bool = True):
        self.name, self.label, self.build = name, label, build
        self.cost = cost or _no_cost
        self._cost_given = cost is not None
        self.declared = _settings(settings)
        self.unread = unread or _nothing_unread
        self.kernel, self.fused, self.causal = kernel, fused, causal
        self.owner = "built-in"  # or the plugin module that registered it

    def __repr__(self) -> str:
        return f"Processor({self.name!r}, owner={self.owner!r})"

    @property
    def present(self) -> bool:
        """A processor runs (`none` is the absence of one)."""
        return self.build is not None

    def check(self) -> None:
        if not callable(self.build):
            raise ComponentError(f"processor {self.name!r} misses its builder (build: (ModelConfig, has_bias) -> "
                                 "ScoreProcessor)")
        if not self._cost_given or not callable(self.cost):
            raise ComponentError(f"processor {self.name!r} misses its cost (cost: ModelConfig -> Cost: parameters, "
                                 "multiply-adds and floats per score-map entry, for the plan)")
        if not isinstance(self.causal, bool):
            raise ComponentError(f"processor {self.name!r}: causal must be True (it reads no later key unless "
                                 "model.leak is on) or False (it does: bidirectional models only)")
        _check_common(self, "processor")


def _check_label(record, kind: str) -> None:
    if not isinstance(record.name, str) or not record.name.isidentifier():
        raise ComponentError(f"{kind} name {record.name!r} must be an identifier (letters, digits, underscores)")
    if not isinstance(record.label, str) or not record.label:
        raise ComponentError(f"{kind} {record.name!r} misses its label (in words, for reports)")


def _check_common(record, kind: str) -> None:
    _check_label(record, kind)
    for setting in record.declared:
        if not isinstance(setting, Setting) or not isinstance(setting.name, str) or not setting.name.isidentifier():
            raise ComponentError(f"{kind} {record.name!r}: settings must be field names or Setting(name, type, "
                                 f"default) records with identifier names (got {setting!r})")
        if not setting.field and setting.type is None:
            raise ComponentError(f"{kind} {record.name!r}: option {setting.name!r} misses its type "
                                 "(Setting(name, type, default))")




class _Record(Protocol):
    """What a registry reads of its records (Encoding, Processor, Form)."""

    @property
    def name(self) -> str: ...

    @property
    def owner(self) -> str: ...

    def check(self) -> None: ...


R = TypeVar("R", bound=_Record)


@dataclass
class Registry(Generic[R]):
    """Records of one kind by name, in registration order (the order an error lists them in)."""

    kind: str
    records: dict[str, R] = field(default_factory=dict)

    def add(self, record: R, replace: bool = False, check: bool = True) -> R:
        if check:
            record.check()
        if record.name in self.records and not replace:
            owner = self.records[record.name].owner
            raise ComponentError(f"{self.kind} {record.name!r} is already registered ({owner}); choose another name")
        self.records[record.name] = record
        return record

    def remove(self, name: str) -> None:
        self.records.pop(name, None)

    def get(self, name: Any, default: Any = None):
        return self.records.get(name, default) if isinstance(name, str) else default

    def __getitem__(self, name: str) -> R:
        return self.records[name]

    def __contains__(self, name: object) -> bool:
        return self.get(name) is not None

    def names(self) -> tuple[str, ...]:
        return tuple(self.records)

    def items(self) -> Iterator[tuple[str, R]]:
        return iter(list(self.records.items()))

    def values(self) -> list[R]:
        return list(self.records.values())

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.records)

    def unknown(self, name: Any, choices: tuple[str, ...] | None = None) -> str:
        """The message for a name that is not registered: what exists, and the closest ("did you mean")."""
        names = choices if choices is not None else self.names()
        close = difflib.get_close_matches(str(name), names, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return (f"unknown {self.kind} {name!r}{hint}; known: {', '.join(names)} (a plugin named in the study's "
                "`plugins:` may register more)")


encodings: Registry[Encoding] = Registry("position encoding")
processors: Registry[Processor] = Registry("score processor")
forms: Registry[Form] = Registry("processor form")
_owners: list[str] = []  # the plugin whose records are being registered (`registering_for`)
_REGISTRIES: dict[str, Registry[Any]] = {"encoding": encodings, "processor": processors, "form": forms}


def registered(kind: str, name: str):
    """The record registered as `name` in `_REGISTRIES[kind]`: what an unpickled record is (`_ByName`)."""
    record = _REGISTRIES[kind].get(name)
    if record is None:
        raise LookupError(f"no {_REGISTRIES[kind].kind} {name!r} is registered in this process: load the plugin "
                          "that registers it (dape_core.plugins.load) before unpickling what uses it")
    return record


@contextmanager
def registering_for(owner: str) -> Iterator[None]:
    """The records registered inside name `owner` (a plugin's or a contrib module's) as theirs."""
    _owners.append(owner)
    try:
        yield
    finally:
        _owners.pop()


def _register(registry: Registry, record):
    if _owners:
        object.__setattr__(record, "owner", _owners[-1])  # Form is a frozen dataclass
    return registry.add(record)


def register_encoding(record: Encoding) -> Encoding:
    """Add a position encoding. ComponentError if its name is taken or a required part is missing."""
    return _register(encodings, _typed(record, Encoding))


def register_processor(record: Processor) -> Processor:
    """Add a score processor. ComponentError if its name is taken or a required part is missing."""
    return _register(processors, _typed(record, Processor))


def register_form(record: Form) -> Form:
    """Add a processor form. ComponentError if its name is taken or a required part is missing."""
    return _register(forms, _typed(record, Form))


def _typed(record, kind: type):
    if not isinstance(record, kind):
        raise ComponentError(f"register_{kind.__name__.lower()} takes a dape_core.components.{kind.__name__} "
                             f"record, got {type(record).__name__}")
    return record


def registered_by(owner: str) -> list[tuple[str, Any]]:
    """(kind, record) of every component `owner` (a plugin's module) registered."""
    return [(registry.kind, record) for registry in (encodings, processors, forms)
            for record in registry.values() if record.owner == owner]


def forget(owner: str) -> None:
    """Unregister what `owner` registered (a plugin loaded again after its file changed, or refused)."""
    for registry in (encodings, processors, forms):
        for name, record in registry.items():
            if record.owner == owner:
                registry.remove(name)


def component_fields() -> tuple[str, ...]:
    """The ModelConfig fields some registered component reads (marked not applicable where the one in use
    does not read them), in registration order."""
    return tuple(dict.fromkeys(name for registry in (encodings, processors) for record in registry.values()
                               for name in record.fields))


def setting_labels() -> dict[str, str]:
    """Every component setting's label in reports, by setting name (options by their own name)."""
    labels = {}
    for registry in (encodings, processors):
        for record in registry.values():
            labels.update({s.name: s.label for s in record.declared if s.label})
    return labels


def value_labels(kind: Literal["pos_encoding", "processor", "form"]) -> dict[str, str]:
    """A component's name -> its label in words, for the settings that name components."""
    registries: dict[str, Registry[Any]] = {"pos_encoding": encodings, "processor": processors, "form": forms}
    return {name: record.label for name, record in registries[kind].items()}

"""Which settings of an experiment its run does not read: a config carries every field (with defaults), but
a model without a score processor has no kernel, an encoding other than FIRE has no L₀, a CHE trial has
no corpus. A record of the run (the orchestrator's MLflow params) marks these as not applicable, so that
nobody reads the Kerple baseline as a kernel-3 run.

The rule, field by field (dotted names as in `ExperimentConfig.to_dict()`):
- model: the processor fields (`kernel_size`, `d_dape`, `form`, `leak`, `attention_block_size`) the score
  processor in use does not read, by its record's `settings` and `unread` (without a processor none of them:
  training then uses PyTorch's fused kernel; with `dape` not `kernel_size`, always 1x1; with a processor but
  no bias encoding not `form`, the processor reads the scores alone); the encoding fields (`rope_random_max`,
  `fire_width`, `fire_l0`) the encoding in use does not read, by its record's `settings`
  (dape_core/components.py, the records in dape_core/encodings/ and dape_core/processors/).
- train: `val_tokens` without `eval_every` (no periodic validation).
- eval: the timing warm-up and repetitions without `timing`.
- data: the fields of the other sources (`pattern` and `separator` are for text and Hugging Face sources,
  `dtype` and `chunk_tokens` for token files, `text_field` and `hf_split` for Hugging Face datasets,
  `vocab_size` for token files).
- a CHE trial (`che:` set) reads neither `data` nor `eval`.
"""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING

from .components import component_fields

if TYPE_CHECKING:
    from .experiment import ExperimentConfig

# data fields read by each source besides the ones every source reads (tokenizer, eos_token, fractions, seed)
_DATA_FIELDS_OF_SOURCE = {
    "stdlib": {"max_files"},
    "text": {"path", "pattern", "separator", "max_files"},
    "tokens": {"path", "dtype", "chunk_tokens", "vocab_size"},
    "hf_disk": {"path", "separator", "text_field", "hf_split", "max_files"},
}
_SOURCE_SPECIFIC = set().union(*_DATA_FIELDS_OF_SOURCE.values())


def _model(cfg: "ExperimentConfig") -> set[str]:
    model = cfg.model
    processor = model.processor_facts
    unused = (set(component_fields()) - set(processor.fields) - set(model.encoding.fields)) | processor.unread(model)
    return {f"model.{name}" for name in unused}


def _data(cfg: "ExperimentConfig") -> set[str]:
    known = {f.name for f in fields(cfg.data)}
    read = _DATA_FIELDS_OF_SOURCE.get(cfg.data.source, _SOURCE_SPECIFIC)
    return {f"data.{name}" for name in (_SOURCE_SPECIFIC - read) & known}


def unused_settings(cfg: "ExperimentConfig") -> set[str]:
    """Dotted names of the settings `cfg` holds that its run does not read (see the module's docstring)."""
    unused = _model(cfg)
    if cfg.train.eval_every is None:
        unused.add("train.val_tokens")
    if cfg.che is not None:
        sections = cfg.to_dict()
        return unused | {f"{section}.{name}" for section in ("data", "eval") for name in sections[section]}
    unused |= _data(cfg)
    if not cfg.eval.timing:
        unused |= {"eval.timing_warmup", "eval.timing_reps"}
    return unused

"""The config sections' constraints live in their types (dape_core/types.py): a YAML boolean is never a
number, no float is NaN or infinite, seeds fit 32 bits, Adam's betas lie in [0, 1); the cross-section checks
of an experiment run at validation, and `ExperimentConfig.to_dict()` is the config the model trains with."""

import math

import pytest
from pydantic import TypeAdapter, ValidationError

from dape_core import CheConfig, DataConfig, EvalConfig, ExperimentConfig, ModelConfig, TrainConfig, build_model
from dape_core.config import PRESETS, Preset
from dape_core.types import SEED_MAX

LM = {"train": {"seq_len": 64}, "eval": {"lengths": [64, 128, 512]}}


def problems(build, **fields) -> list[tuple[str, str]]:
    """(field path, message) of every problem `build(**fields)` reports."""
    with pytest.raises(ValidationError) as error:
        build(**fields)
    return [(".".join(map(str, item["loc"])), item["msg"]) for item in error.value.errors()]


def only_problem(build, **fields) -> tuple[str, str]:
    [problem] = problems(build, **fields)
    return problem


@pytest.mark.parametrize("build,field,value", [
    (ModelConfig, "kernel_size", True),  # `kernel_size: yes` was a kernel of 1
    (ModelConfig, "d_dape", True),
    (TrainConfig, "steps", True),
    (TrainConfig, "lr", True),
    (TrainConfig, "seed", False),
    (EvalConfig, "tail_tokens", True),
    (DataConfig, "val_fraction", False),
    (CheConfig, "steps", True),
])
def test_a_yaml_boolean_is_never_a_number(build, field, value):
    fields = {"lengths": [64], field: value} if build is EvalConfig else {field: value}
    path, message = only_problem(build, **fields)
    assert path.split(".")[0] == field
    assert f"got the boolean {value}" in message


def test_integers_are_strict_and_floats_take_integers_and_numeric_strings():
    assert only_problem(TrainConfig, steps=5.0) == ("steps", "Input should be a valid integer")
    assert only_problem(TrainConfig, steps="5") == ("steps", "Input should be a valid integer")
    assert only_problem(ModelConfig, leak=1)[0] == "leak"  # a boolean field takes only a boolean
    assert TrainConfig(lr=1).lr == 1.0
    assert TrainConfig(lr="1e-3").lr == 1e-3  # PyYAML reads `1e-3` (no dot) as a string


@pytest.mark.parametrize("field", ["lr", "eps", "grad_clip", "weight_decay", "beta1", "warmup_fraction"])
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, "inf", ".nan"])
def test_no_float_is_infinite_or_nan(field, value):
    path, message = only_problem(TrainConfig, **{field: value})
    assert path == field
    assert message in ("Input should be a finite number",
                       "Input should be a valid number, unable to parse string as a number")


def test_no_float_is_infinite_in_the_other_sections():
    assert only_problem(CheConfig, lr=math.inf) == ("lr", "Input should be a finite number")
    assert only_problem(DataConfig, test_fraction=math.nan) == ("test_fraction", "Input should be a finite number")


def test_optimizer_settings_are_sane():
    assert only_problem(TrainConfig, beta1=1.5) == ("beta1", "Input should be less than 1")
    assert only_problem(TrainConfig, beta2=1.0) == ("beta2", "Input should be less than 1")
    assert only_problem(TrainConfig, beta1=-0.1) == ("beta1", "Input should be greater than or equal to 0")
    assert TrainConfig(beta1=0.0, beta2=0.999).beta2 == 0.999
    assert only_problem(TrainConfig, weight_decay=-0.1) == ("weight_decay",
                                                            "Input should be greater than or equal to 0")
    assert only_problem(TrainConfig, grad_clip=0) == ("grad_clip", "Input should be greater than 0")
    assert only_problem(TrainConfig, eps=0) == ("eps", "Input should be greater than 0")
    assert TrainConfig(weight_decay=0.0).weight_decay == 0.0


@pytest.mark.parametrize("build,field", [(TrainConfig, "seed"), (DataConfig, "split_seed"), (EvalConfig, "seed")])
def test_seeds_are_32_bit_and_not_negative(build, field):
    extra = {"lengths": [64]} if build is EvalConfig else {}
    assert only_problem(build, **extra, **{field: SEED_MAX + 1}) == (
        field, f"Input should be less than or equal to {SEED_MAX}")
    assert only_problem(build, **extra, **{field: -1}) == (field, "Input should be greater than or equal to 0")
    assert getattr(build(**extra, **{field: SEED_MAX}), field) == SEED_MAX


def test_model_vocabulary_must_hold_the_byte_tokenizer():
    path, message = only_problem(ExperimentConfig, model={"vocab_size": 200}, **LM)
    assert "model.vocab_size=200 is below the data's vocabulary of 256 (the byte tokenizer)" in message
    # A token file's declared vocabulary is known without reading it too.
    tokens = {"source": "tokens", "path": "ids.bin", "vocab_size": 1000}
    path, message = only_problem(ExperimentConfig, model={"vocab_size": 512}, data=tokens, **LM)
    assert "model.vocab_size=512 is below the data's vocabulary of 1000 (data.vocab_size)" in message
    # A tokenizer.json is read at data time (run_experiment checks it before training).
    ExperimentConfig(model={"vocab_size": 200}, data={"tokenizer": "gpt2/tokenizer.json"}, **LM)
    # A CHE experiment sizes the vocabulary for its task.
    assert ExperimentConfig(model={"vocab_size": 2}, che={"task": "parity_check"}).model.vocab_size == 3


def test_rope_random_max_is_checked_against_the_length_the_model_trains_at():
    rope = {"pos_encoding": "rope_random"}
    path, message = only_problem(ExperimentConfig, model={**rope, "rope_random_max": 48}, **LM)
    assert path == "model" and "rope_random_max=48 is below the training length 64" in message
    # Below ModelConfig's own default of 512 but above train.seq_len: what will be used is what counts.
    assert ExperimentConfig(model={**rope, "rope_random_max": 100}, **LM).model.rope_random_max == 100
    assert ExperimentConfig(model=ModelConfig(**rope, rope_random_max=600), **LM).model.rope_random_max == 600


def test_to_dict_is_the_config_the_model_is_built_with():
    cfg = ExperimentConfig(model={"preset": "tiny", "pos_encoding": "rope_random"}, **LM)
    model = cfg.to_dict()["model"]
    assert model["train_length"] == 64  # train.seq_len, not ModelConfig's 512
    assert model["rope_random_max"] == 512  # the largest evaluation length
    assert build_model(cfg.model).blocks[0].attn.pos.max_position == 512
    assert list(cfg.to_dict()) == ["model", "data", "train", "eval", "che", "distributed"]
    assert ExperimentConfig(**cfg.to_dict()).to_dict() == cfg.to_dict()  # resolving twice changes nothing

    fire = ExperimentConfig(model={"preset": "tiny", "pos_encoding": "fire"}, **LM).to_dict()["model"]
    assert (fire["train_length"], fire["fire_l0"], fire["rope_random_max"]) == (64, 64, None)
    assert build_model(ExperimentConfig(**{**LM, "model": fire}).model).blocks[0].attn.pos.threshold == 64
    # A given value is kept; fields an encoding does not use stay as given.
    given = ExperimentConfig(model={"pos_encoding": "fire", "fire_l0": 100, "rope_random_max": 700}, **LM).model
    assert (given.fire_l0, given.rope_random_max) == (100, 700)
    kerple = ExperimentConfig(model={"pos_encoding": "kerple"}, **LM).model
    assert (kerple.train_length, kerple.fire_l0, kerple.rope_random_max) == (64, None, None)


def test_a_che_experiment_logs_the_model_it_trains():
    cfg = ExperimentConfig(model={"preset": "tiny", "pos_encoding": "rope_random"},
                           che={"task": "reverse_string", "train_max_length": 8, "test_lengths": [9, 16]})
    model = cfg.to_dict()["model"]
    # reverse_string reads n inputs and n placeholders: 16 tokens at the longest training length, 32 at 16.
    assert (model["train_length"], model["rope_random_max"], model["causal"]) == (16, 32, False)
    assert cfg.train.seq_len == 16
    assert cfg.che.model_config(ModelConfig(preset="tiny", pos_encoding="rope_random")) == cfg.model


def test_model_config_alone_keeps_its_own_defaults():
    cfg = ModelConfig(pos_encoding="rope_random")
    assert (cfg.train_length, cfg.rope_random_max, cfg.random_positions_max) == (512, None, 8 * 512)
    assert ModelConfig(pos_encoding="fire").fire_threshold == 512


def test_the_schema_carries_the_choices_and_the_bounds():
    schema = TypeAdapter(ExperimentConfig).json_schema()
    defs = schema["$defs"]
    model, train = defs["ModelConfig"]["properties"], defs["TrainConfig"]["properties"]
    assert "rope_random" in model["pos_encoding"]["enum"] and model["processor"]["enum"] == ["none", "dape", "dapev2"]
    assert set(model["preset"]["enum"]) == set(PRESETS)
    assert model["form"]["enum"] == ["concat_residual", "concat", "add_residual", "bias_only"]
    assert train["precision"]["enum"] == ["auto", "fp32", "bf16", "fp16"]
    assert defs["DataConfig"]["properties"]["source"]["enum"] == ["stdlib", "text", "tokens", "hf_disk"]
    assert defs["EvalConfig"]["properties"]["split"]["enum"] == ["validation", "test"]
    assert "associative_recall" in defs["CheConfig"]["properties"]["task"]["enum"]
    assert train["steps"]["minimum"] == 1 and train["beta1"] == {"default": 0.9, "exclusiveMaximum": 1, "minimum": 0,
                                                                  "title": "Beta1", "type": "number"}
    assert train["seed"]["maximum"] == SEED_MAX


def test_preset_names_are_the_preset_table():
    assert set(Preset.__args__) == set(PRESETS)

"""The trainer: schedule, gradient accumulation, mixed precision, periodic validation, checkpoint/resume on
the same loss curve, and a clear stop on a non-finite loss."""

import math

import pytest
import torch
from pydantic import ValidationError

from dape_core import ExperimentConfig, NonFiniteLossError, build_model, run_experiment
from dape_core.config import ModelConfig
from dape_core.data import DataConfig, TrainStream, evaluation_windows, load_corpus
from dape_core.evaluate import EvalConfig, perplexity_by_length
from dape_core.train import (
    CheckpointMismatchError,
    CheckpointStore,
    CheckpointUnreadable,
    Precision,
    TrainConfig,
    TrainerCallback,
    cosine_lr,
    resolve_device,
    resolve_precision,
    train,
)
from dape_core.train.loop import TIMING_WARMUP_STEPS, median_step_ms

TINY_MODEL = {"preset": "tiny", "pos_encoding": "kerple", "processor": "dapev2", "d_dape": 8}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def corpus():
    return load_corpus(DataConfig(max_files=150))


class Recorder(TrainerCallback):
    def __init__(self, stop_at_checkpoint: int | None = None):
        self.losses, self.validations, self.checkpoints = {}, [], []
        self.set_aside: str | None = None
        self.stop_at_checkpoint = stop_at_checkpoint

    def on_step(self, step, loss, lr):
        self.losses[step] = loss

    def on_validation(self, step, val_loss):
        self.validations.append((step, val_loss))

    def on_checkpoint_set_aside(self, note):
        self.set_aside = note

    def on_checkpoint(self, step, path):
        self.checkpoints.append((step, path))
        if step == self.stop_at_checkpoint:
            raise KeyboardInterrupt("simulated preemption right after a checkpoint")


def _config(**train):
    return ExperimentConfig(model=TINY_MODEL, data={"max_files": 150},
                            train={"steps": 24, "batch_size": 4, "seq_len": 32, "log_every": 1, **train},
                            eval={"lengths": [32, 64], "tail_tokens": 16, "n_windows": 4, "timing": False})


def test_cosine_schedule_warms_up_then_decays_to_a_tenth():
    cfg = TrainConfig(steps=1000, lr=1e-3, warmup_fraction=0.01)
    assert cosine_lr(0, cfg) == pytest.approx(1e-4)
    assert cosine_lr(9, cfg) == pytest.approx(1e-3)
    assert cosine_lr(10, cfg) == pytest.approx(1e-3)
    assert cosine_lr(1000, cfg) == pytest.approx(1e-4)
    lrs = [cosine_lr(step, cfg) for step in range(10, 1000)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


def test_config_errors_name_the_problem():
    with pytest.raises(ValidationError, match="batch_size 10 is not divisible by grad_accum 4"):
        TrainConfig(batch_size=10, grad_accum=4)
    # The field, the valid choices, and the value given (pydantic keeps it as the error's input).
    with pytest.raises(ValidationError) as error:
        TrainConfig(precision="fp8")
    [problem] = error.value.errors()
    assert (problem["loc"], problem["input"]) == (("precision",), "fp8")
    assert problem["msg"] == "Input should be 'auto', 'fp32', 'bf16' or 'fp16'"
    with pytest.raises(ValidationError) as error:
        TrainConfig(device="tpu")
    [problem] = error.value.errors()
    assert (problem["loc"], problem["input"]) == (("device",), "tpu")
    assert "auto|cpu|cuda" in problem["msg"]


def test_device_and_precision_are_chosen_automatically():
    device = resolve_device("auto")
    assert device.type == ("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cpu":
        assert resolve_precision("auto", device).name == "fp32"
        with pytest.raises(RuntimeError, match="no CUDA device"):
            resolve_device("cuda")
    else:
        assert resolve_precision("auto", device).name in ("bf16", "fp16")


def test_gradient_accumulation_matches_one_big_batch(corpus):
    params, curves = [], []
    for accum in (1, 4):
        torch.manual_seed(0)
        model = build_model(ModelConfig(**TINY_MODEL))
        sink = Recorder()
        train(model, TrainStream(corpus.stream_regions(), 32, seed=0),
              TrainConfig(steps=3, batch_size=8, seq_len=32, grad_accum=accum, log_every=1), sink)
        params.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
        curves.append(sink.losses)
    for step in (1, 2, 3):
        assert curves[0][step] == pytest.approx(curves[1][step], rel=1e-6)
    # Adam divides by the gradient's own scale, so rounding differences in near-zero gradients show up
    # at up to ~1% of one update (lr 1e-3); a wrong accumulation (no 1/accum, or a partial batch) is ~1e-3.
    assert torch.allclose(params[0], params[1], atol=5e-5), (params[0] - params[1]).abs().max()


def test_the_multi_tensor_update_is_the_per_parameter_one_bit_for_bit(corpus):
    """make_optimizer and clip_gradients take PyTorch's multi-tensor (`foreach`) path on CPU for speed; the
    weights after a few steps (with clipping active) are those of PyTorch's default per-parameter loop, bit for
    bit, so the main job's perplexities do not move."""
    from dape_core.train import loop, schedule

    weights = []
    for multi in (schedule.multi_tensor, lambda parameters: False):
        torch.manual_seed(0)
        model = build_model(ModelConfig(**TINY_MODEL))
        original = schedule.multi_tensor
        schedule.multi_tensor = loop.multi_tensor = multi
        try:
            assert schedule.make_optimizer(model, TrainConfig(steps=4)).defaults["foreach"] == multi(
                list(model.parameters()))
            train(model, TrainStream(corpus.stream_regions(), 32, seed=0),
                  TrainConfig(steps=4, batch_size=8, seq_len=32, grad_clip=0.05, log_every=1))
        finally:
            schedule.multi_tensor = loop.multi_tensor = original
        weights.append([p.detach().clone() for p in model.parameters()])
    assert schedule.multi_tensor(list(build_model(ModelConfig(**TINY_MODEL)).parameters())) is True
    assert all(torch.equal(a, b) for a, b in zip(*weights))


def test_resume_from_a_checkpoint_continues_the_same_loss_curve(tmp_path):
    cfg = _config(eval_every=8)
    straight = Recorder()
    reference = run_experiment(cfg, straight, threads=1)

    interrupted = Recorder(stop_at_checkpoint=16)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, interrupted, threads=1, checkpoint_dir=tmp_path, checkpoint_every=8)
    assert [step for step, _ in interrupted.checkpoints] == [8, 16]
    assert not list(tmp_path.glob("*.tmp"))  # written atomically: only the finished file remains
    state = torch.load(tmp_path / "trainer.pt", weights_only=True)
    assert state["step"] == 16 and {"model", "optimizer", "scaler", "rng"} <= state.keys()

    resumed = Recorder()
    result = run_experiment(cfg, resumed, threads=1, checkpoint_dir=tmp_path, checkpoint_every=8)
    assert result.resumed_from == 16
    assert sorted(resumed.losses) == list(range(17, 25))  # the steps after the checkpoint, once each
    for step, loss in resumed.losses.items():
        assert loss == pytest.approx(straight.losses[step], rel=1e-6, abs=1e-7), step
    assert [step for step, _ in resumed.validations] == [24]
    assert resumed.validations[0][1] == pytest.approx(straight.validations[-1][1], rel=1e-6)
    for length, value in reference.perplexity.items():
        assert result.perplexity[length] == pytest.approx(value, rel=1e-5)
    assert [step for step, _ in straight.validations] == [8, 16, 24]
    assert straight.validations[-1][1] < straight.validations[0][1]  # held-out loss falls as it trains

    # resume=False starts over.
    fresh = Recorder()
    assert run_experiment(cfg, fresh, threads=1, checkpoint_dir=tmp_path, resume=False).resumed_from is None
    assert min(fresh.losses) == 1


class _NotWeights:
    """A pickled object a weights-only load refuses (its unpickling would run code)."""


def _write_unusable_checkpoint(kind: str, folder, corpus) -> None:
    path = folder / "trainer.pt"
    cfg = TrainConfig(steps=4, batch_size=4, seq_len=32, log_every=1)
    if kind == "another trial's":  # a real checkpoint, of another config
        train(build_model(ModelConfig(**TINY_MODEL)), TrainStream(corpus.stream_regions(), 32, seed=0), cfg,
              checkpoints=CheckpointStore(folder, "fingerprint-of-another-trial"), checkpoint_every=2)
    elif kind == "truncated":
        train(build_model(ModelConfig(**TINY_MODEL)), TrainStream(corpus.stream_regions(), 32, seed=0), cfg,
              checkpoints=CheckpointStore(folder, "mine"), checkpoint_every=2)
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif kind == "random bytes":
        path.write_bytes(bytes(range(256)) * 64)
    else:  # "not weights"
        torch.save({"model": _NotWeights()}, path)


@pytest.mark.parametrize("kind", ["truncated", "random bytes", "not weights", "another trial's"])
def test_an_unusable_checkpoint_is_named_set_aside_and_training_starts_from_scratch(kind, tmp_path, corpus):
    _write_unusable_checkpoint(kind, tmp_path, corpus)
    store = CheckpointStore(tmp_path, "mine")
    with pytest.raises(CheckpointUnreadable) as refused:
        store.load(torch.device("cpu"))
    assert str(tmp_path / "trainer.pt") in str(refused.value)
    assert "weights_only" not in str(refused.value)  # never torch's advice to load it unsafely
    assert isinstance(refused.value, CheckpointMismatchError) == (kind == "another trial's")

    sink = Recorder()
    result = train(build_model(ModelConfig(**TINY_MODEL)), TrainStream(corpus.stream_regions(), 32, seed=0),
                   TrainConfig(steps=3, batch_size=4, seq_len=32, log_every=1), sink, checkpoints=store,
                   checkpoint_every=3)
    assert result.resumed_from is None and min(sink.losses) == 1  # from scratch, never from the bad file
    assert sink.set_aside.startswith(f"checkpoint {tmp_path / 'trainer.pt'}") or \
        sink.set_aside.startswith(f"{tmp_path / 'trainer.pt'}")
    assert "the trial starts from scratch" in sink.set_aside and "weights_only" not in sink.set_aside
    (aside,) = tmp_path.glob("trainer.pt.corrupt-*")  # kept for inspection, under the name the note gives
    assert aside.name in sink.set_aside
    assert store.load(torch.device("cpu"))["step"] == 3  # the new run's own checkpoint replaced it
    assert not list(tmp_path.glob("*.tmp"))


def test_ms_per_step_leaves_out_the_warm_up_steps():
    """One rule for every experiment (LM and CHE share the loop): the first TIMING_WARMUP_STEPS steps are
    dropped when there are more than twice as many, else the first half."""
    slow_start = [1000.0] * TIMING_WARMUP_STEPS + [10.0, 11.0, 12.0, 13.0, 14.0, 15.0]
    assert median_step_ms(slow_start) == 12.5
    assert median_step_ms([1000.0, 1000.0, 5.0, 7.0]) == 6.0  # short runs: the second half
    assert median_step_ms([], fallback=3.0) == 3.0  # a run resumed at its last step keeps the stored value


class _PoisonWeights(TrainerCallback):
    """Fault injection: turns one weight into NaN after a given step."""

    def __init__(self, model, step):
        self.model, self.step = model, step

    def on_step(self, step, loss, lr):
        if step == self.step:
            with torch.no_grad():
                self.model.embed.weight[:, 0] = float("nan")


def test_non_finite_loss_stops_the_trial_with_a_clear_reason(corpus):
    model = build_model(ModelConfig(**TINY_MODEL))
    cfg = TrainConfig(steps=10, batch_size=4, seq_len=32, log_every=1)
    with pytest.raises(NonFiniteLossError, match=r"training loss became nan at step 4 .*stopped before the update"):
        train(model, TrainStream(corpus.stream_regions(), 32, seed=0), cfg, _PoisonWeights(model, 3))


@pytest.mark.slow
def test_mixed_precision_trains_and_evaluates_within_tolerance(corpus):
    """fp16 with loss scaling and bf16 autocast, on CPU here (on GPU they are the default): the loss curve
    and the perplexity stay close to float32's."""
    stream_cfg = TrainConfig(steps=30, batch_size=8, seq_len=32, log_every=1, lr=2e-3)
    curves, models = {}, {}
    for name in ("fp32", "fp16"):
        torch.manual_seed(0)
        model = build_model(ModelConfig(**TINY_MODEL))
        sink = Recorder()
        train(model, TrainStream(corpus.stream_regions(), 32, seed=0), stream_cfg, sink,
              precision=Precision(name, "cpu"))
        curves[name], models[name] = sink.losses, model
    assert all(math.isfinite(v) for v in curves["fp16"].values())
    assert curves["fp16"][30] < curves["fp16"][1] - 0.5
    assert curves["fp16"][30] == pytest.approx(curves["fp32"][30], rel=0.03)

    eval_cfg = EvalConfig(lengths=[32, 128], tail_tokens=16, n_windows=8)
    windows = evaluation_windows(corpus.validation, eval_cfg.lengths, eval_cfg.windows_per_length, seed=0)
    exact = perplexity_by_length(models["fp32"], windows, eval_cfg)
    for name in ("bf16", "fp16"):
        approx = perplexity_by_length(models["fp32"], windows, eval_cfg, precision=Precision(name, "cpu"))
        for length in exact:
            assert approx[length] == pytest.approx(exact[length], rel=0.02), (name, length)

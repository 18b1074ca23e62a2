"""CHE trainer/evaluator (`dape_core.che.experiment`) and its path through `run_experiment`."""

import pytest
from pydantic import ValidationError

from dape_core import CheConfig, ExperimentConfig, ModelConfig, TrainConfig, run_che, run_experiment
from dape_core.che import TASKS
from dape_core.train import TrainerCallback


@pytest.mark.parametrize("fields,named", [
    ({"task": "parity"}, "task"),
    ({"test_lengths": [0, 50]}, "test_lengths"),
    ({"test_lengths": []}, "test_lengths"),
    ({"test_lengths": "500..41"}, "test_lengths"),
    ({"train_max_length": 0}, "train_max_length"),
    ({"steps": -1}, "steps"),
    ({"lr": 0}, "lr"),
    ({"form": "decoder"}, "form"),
    ({"unknown_field": 1}, "unknown_field"),
])
def test_che_config_errors_name_the_field(fields, named):
    with pytest.raises(ValidationError) as error:
        CheConfig(**fields)
    assert named in str(error.value)


def test_test_lengths_accept_the_papers_range():
    assert CheConfig(test_lengths="41..500").test_lengths == list(range(41, 501))
    assert CheConfig(test_lengths=[100, 41, 41]).test_lengths == [41, 100]


def test_causal_form_is_for_recall_only_and_recall_lengths_must_fit_the_keys():
    with pytest.raises(ValidationError, match="causal"):
        CheConfig(task="parity_check", form="causal")
    with pytest.raises(ValidationError, match="distinct keys"):
        CheConfig(task="associative_recall", test_lengths=[2000])
    assert CheConfig(task="associative_recall", form="causal", test_lengths=[64]).min_length == 4


def test_experiment_che_section_is_validated_with_its_path():
    with pytest.raises(ValidationError) as error:
        ExperimentConfig(che={"task": "nope"})
    assert "che" in str(error.value) and "task" in str(error.value)


def test_che_section_skips_the_lm_checks_and_sets_the_train_section():
    # eval lengths below train.seq_len would fail an LM experiment; a CHE experiment ignores eval.
    cfg = ExperimentConfig(che={"task": "reverse_string", "steps": 7, "batch_size": 8, "lr": 5e-4},
                           train={"seq_len": 512}, eval={"lengths": [64]})
    assert (cfg.train.steps, cfg.train.batch_size, cfg.train.lr) == (7, 8, 5e-4)
    assert cfg.train.seq_len == 80  # 40 inputs + 40 placeholders: the longest training sequence
    assert cfg.fingerprint() != ExperimentConfig(che={"task": "odds_first", "steps": 7, "batch_size": 8, "lr": 5e-4},
                                                 train={"seq_len": 512}, eval={"lengths": [64]}).fingerprint()


def test_encoder_model_config_fits_every_task():
    for name, task in TASKS.items():
        model = CheConfig(task=name).model_config(ModelConfig(preset="tiny"))
        assert not model.causal
        assert model.vocab_size >= max(task.model_vocab_size, task.output_classes)


@pytest.mark.slow
def test_small_encoder_learns_cycle_navigation_on_training_lengths(one_torch_thread):
    # Chance is 1/5. A 2-layer Kerple encoder reached 0.94-0.98 after 400 steps (seeds 0, 1, 2) and
    # 0.98-1.0 after 600 (seeds 0, 1) on lengths 1..10.
    cfg = CheConfig(task="cycle_navigation", train_max_length=10, test_lengths=[11, 20], steps=600, batch_size=64,
                    lr=3e-3, eval_batches=1)
    result = run_che(cfg, ModelConfig(preset="tiny", pos_encoding="kerple"), TrainConfig(warmup_fraction=0.05))
    assert result.acc_train > 0.9, result.train_accuracy
    assert set(result.accuracy) == {11, 20} and set(result.train_accuracy) == set(range(1, 11))
    assert all(0.0 <= value <= 1.0 for value in result.accuracy.values())


@pytest.mark.slow
def test_dape_conv_lets_nope_do_associative_recall(one_torch_thread):
    # docs/method.md §8 (this project's extension): a causal NoPE LM with a 1x3 DAPE V2 kernel recalls the queried
    # values; chance is 1/32. 150 steps already gave 1.0 on lengths 4..16 and 0.997 at 32 and 64.
    cfg = CheConfig(task="associative_recall", form="causal", train_max_length=16, test_lengths=[32], steps=200,
                    batch_size=64, lr=3e-3, eval_batches=1, eval_batch_size=64)
    model = ModelConfig(preset="tiny", pos_encoding="nope", processor="dapev2", kernel_size=3, d_dape=16)
    result = run_che(cfg, model, TrainConfig(warmup_fraction=0.05))
    assert result.acc_train > 0.9, result.train_accuracy
    assert result.acc_test > 0.5, result.accuracy


def test_run_experiment_che_path_returns_accuracy_metrics(one_torch_thread):
    cfg = ExperimentConfig(model={"preset": "tiny", "pos_encoding": "kerple", "processor": "dapev2", "d_dape": 8},
                           che={"task": "reverse_string", "train_max_length": 8, "test_lengths": [9, 16],
                                "steps": 20, "batch_size": 16, "eval_batches": 1, "eval_batch_size": 16},
                           train={"log_every": 5})
    steps = []

    class Sink:
        def on_step(self, step, loss, lr):
            steps.append(step)

    result = run_experiment(cfg, Sink(), threads=1)
    metrics = result.metrics()
    assert {"che_acc_train", "che_acc_test", "acc_9", "acc_16", "train_loss"} <= set(metrics)
    assert not any(name.startswith(("ppl_", "delta_p_")) for name in metrics)
    assert 0.0 <= metrics["che_acc_test"] <= 1.0
    assert metrics["che_acc_test"] == pytest.approx((metrics["acc_9"] + metrics["acc_16"]) / 2)
    assert steps == [5, 10, 15, 20]
    assert result.data_record["task"] == "reverse_string"


@pytest.mark.parametrize("task", sorted(TASKS) + ["associative_recall"])
def test_every_task_trains_and_scores_on_the_encoder(task, one_torch_thread):
    # Shapes and masks of every task through training and evaluation (2 steps; nothing is learnt).
    cfg = CheConfig(task=task, train_max_length=6, test_lengths=[7, 9], steps=2, batch_size=4, eval_batches=1,
                    eval_batch_size=4)
    result = run_che(cfg, ModelConfig(preset="tiny", pos_encoding="kerple", processor="dapev2", d_dape=4))
    assert set(result.accuracy) == {7, 9}
    assert all(0.0 <= value <= 1.0 for value in [*result.accuracy.values(), *result.train_accuracy.values()])


class _Recorder(TrainerCallback):
    """Losses by step, validations, checkpoints; raises KeyboardInterrupt after step `kill_at` (a killed trial)."""

    def __init__(self, kill_at: int | None = None):
        self.losses, self.validations, self.checkpoints, self.kill_at = {}, [], [], kill_at

    def on_step(self, step, loss, lr):
        self.losses[step] = loss
        if step == self.kill_at:
            raise KeyboardInterrupt(f"simulated kill after step {step}")

    def on_validation(self, step, val_loss):
        self.validations.append((step, val_loss))

    def on_checkpoint(self, step, path):
        self.checkpoints.append(step)


def _recall_experiment(**train) -> ExperimentConfig:
    return ExperimentConfig(model={"preset": "tiny", "pos_encoding": "nope", "processor": "dapev2", "d_dape": 8},
                            che={"task": "associative_recall", "form": "causal", "train_max_length": 12,
                                 "test_lengths": [16], "steps": 14, "batch_size": 8, "lr": 3e-3, "eval_batches": 1,
                                 "eval_batch_size": 16},
                            train={"log_every": 1, **train})


def test_a_killed_che_trial_resumes_from_its_checkpoint_and_ends_as_an_uninterrupted_one(tmp_path, one_torch_thread):
    cfg = _recall_experiment(eval_every=7)
    straight = _Recorder()
    reference = run_experiment(cfg, straight, threads=1)

    killed = _Recorder(kill_at=10)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, killed, threads=1, checkpoint_dir=tmp_path, checkpoint_every=4)
    assert killed.checkpoints == [4, 8]

    resumed = _Recorder()
    result = run_experiment(cfg, resumed, threads=1, checkpoint_dir=tmp_path, checkpoint_every=4)
    assert result.resumed_from == 8
    assert sorted(resumed.losses) == list(range(9, 15))  # steps 9 and 10 are redone, from the same state
    for step, loss in resumed.losses.items():
        assert loss == pytest.approx(straight.losses[step], rel=1e-6, abs=1e-7), step
    assert result.final_train_loss == pytest.approx(reference.final_train_loss, rel=1e-6)
    assert result.che_accuracy == pytest.approx(reference.che_accuracy, abs=1e-9)
    assert result.che_acc_train == pytest.approx(reference.che_acc_train, abs=1e-9)
    assert result.tokens_seen == reference.tokens_seen
    # Validation: every 7 steps and at the end; the resumed run carries the history of the first.
    assert [step for step, _ in straight.validations] == [7, 14]
    assert [step for step, _ in result.val_history] == [7, 14]
    assert result.val_history[-1][1] == pytest.approx(reference.val_history[-1][1], rel=1e-6)

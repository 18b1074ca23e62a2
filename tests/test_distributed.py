"""dape_core under torch.distributed on CPU (gloo), no Ray: two workers train the same run as one worker (DDP
and FSDP2), rank 0 alone evaluates and reports, and a two-worker run killed mid-training resumes from its
sharded (DCP) checkpoint, on two workers and on one.

Tolerance. Two workers compute the same global batch as one, so they differ only in the order of float32
sums: each rank averages its half of the batch and the halves are averaged across ranks (DDP's all-reduce,
FSDP's reduce-scatter) instead of one mean over the whole batch. float32 resolves about 6e-7 at a loss of
~5 nats, and AdamW carries a last-bit difference from one step to the next. The loss curves may therefore
differ by 2e-5 nats (measured: at most 5e-7 over these 8 steps) and perplexities by a relative 1e-5.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from distributed_support import max_abs_difference, run_job, run_on_workers, with_workers
from pydantic import ValidationError

from dape_core import ExperimentConfig, run_experiment
from dape_core.data import TrainStream

LOSS_TOLERANCE = 2e-5  # nats, absolute: see the module docstring
PPL_RELATIVE_TOLERANCE = 1e-5

CONFIG = {
    "model": {"preset": "tiny", "pos_encoding": "kerple", "processor": "dapev2", "d_dape": 8},
    "data": {"max_files": 60},
    # 8 sequences a step: 4 per worker, in 2 micro-batches of 2 (accumulation on every rank, as on one).
    "train": {"steps": 8, "batch_size": 8, "grad_accum": 2, "seq_len": 32, "log_every": 1, "eval_every": 4,
              "val_tokens": 512},
    "eval": {"lengths": [32, 64, 256], "tail_tokens": 16, "n_windows": 4, "timing": False},  # 256 > 128: block path
}
CHECKPOINT_EVERY, KILLED_AFTER = 3, 6


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def one_worker():
    return run_job(CONFIG)


@pytest.fixture(scope="module")
def checkpoint_root(tmp_path_factory):
    return tmp_path_factory.mktemp("sharded")


@pytest.fixture(scope="module")
def two_workers(checkpoint_root):
    """One session of two processes: DDP (checkpointing as it goes), FSDP, then an FSDP run that checkpoints
    every 3 steps and is killed right after its step-6 checkpoint (both processes exit at once, without
    cleanup)."""
    ddp, fsdp, killed = run_on_workers(2, [
        {"config": with_workers(CONFIG, 2, "ddp"), "checkpoint_dir": str(checkpoint_root / "ddp"),
         "checkpoint_every": CHECKPOINT_EVERY},
        {"config": with_workers(CONFIG, 2, "fsdp")},
        {"config": with_workers(CONFIG, 2, "fsdp"), "checkpoint_dir": str(checkpoint_root / "trial"),
         "checkpoint_every": CHECKPOINT_EVERY, "die_after_checkpoint": KILLED_AFTER},
    ])
    assert killed is None  # the processes died before finishing it
    shutil.copytree(checkpoint_root / "trial", checkpoint_root / "for_one_worker")
    return {"ddp": ddp, "fsdp": fsdp}


@pytest.mark.parametrize("parallelism", ["ddp", "fsdp"])
@pytest.mark.slow
def test_two_workers_follow_the_one_worker_loss_curve(one_worker, two_workers, parallelism):
    rank0, rank1 = two_workers[parallelism]
    assert len(rank0["losses"]) == CONFIG["train"]["steps"]
    assert max_abs_difference(one_worker["losses"], rank0["losses"]) < LOSS_TOLERANCE
    for (step, ours), (their_step, theirs) in zip(one_worker["validations"], rank0["validations"], strict=True):
        assert step == their_step and ours == pytest.approx(theirs, abs=LOSS_TOLERANCE)
    # Rank 0 evaluated (the 256-token windows on the exact block path) and reported, once.
    single, distributed = one_worker["result"], rank0["result"]
    assert distributed["perplexity"].keys() == single["perplexity"].keys() == {"32", "64", "256"}
    for length, value in single["perplexity"].items():
        assert distributed["perplexity"][length] == pytest.approx(value, rel=PPL_RELATIVE_TOLERANCE)
    assert distributed["tokens_seen"] == single["tokens_seen"] == 8 * 8 * 32  # the global batch, all ranks
    assert distributed["num_parameters"] == single["num_parameters"]
    assert rank1 == {"losses": {}, "validations": [], "checkpoints": [], "result": None}


@pytest.fixture(scope="module")
def resumed(two_workers, checkpoint_root):
    """Two workers (FSDP) resume the killed run; two workers resume a one-worker run interrupted at step 6,
    once with DDP and once with FSDP (each from its own copy of the one-worker checkpoint)."""
    one_worker_folder = checkpoint_root / "from_one_worker"
    assert run_job(CONFIG, checkpoint_dir=str(one_worker_folder), checkpoint_every=CHECKPOINT_EVERY,
                   interrupt_after_checkpoint=KILLED_AFTER) is None
    assert (one_worker_folder / "trainer.pt").is_file()
    shutil.copytree(one_worker_folder, checkpoint_root / "from_one_worker_fsdp")
    killed, from_one_ddp, from_one_fsdp = run_on_workers(2, [
        {"config": with_workers(CONFIG, 2, "fsdp"), "checkpoint_dir": str(checkpoint_root / "trial"),
         "checkpoint_every": CHECKPOINT_EVERY},
        {"config": with_workers(CONFIG, 2, "ddp"), "checkpoint_dir": str(one_worker_folder),
         "checkpoint_every": CHECKPOINT_EVERY},
        {"config": with_workers(CONFIG, 2, "fsdp"), "checkpoint_dir": str(checkpoint_root / "from_one_worker_fsdp"),
         "checkpoint_every": CHECKPOINT_EVERY},
    ])
    return {"killed": killed[0], "from_one_worker": {"ddp": from_one_ddp[0], "fsdp": from_one_fsdp[0]}}


@pytest.mark.slow
def test_killed_two_worker_run_resumes_from_its_sharded_checkpoint(two_workers, checkpoint_root, resumed):
    step = checkpoint_root / "for_one_worker" / "sharded" / "step_000006"  # the folder as the crash left it
    assert (step.parent / "latest").read_text() == step.name  # the last complete checkpoint
    assert {"meta.pt", "rng_rank0.pt", "rng_rank1.pt", ".metadata"} <= {p.name for p in step.iterdir()}
    assert len(list(step.glob("*.distcp"))) == 2  # one shard file per rank
    assert not (step.parent.parent / "trainer.pt").exists()

    rank0, uninterrupted = resumed["killed"], two_workers["fsdp"][0]
    assert rank0["result"]["resumed_from"] == KILLED_AFTER
    assert sorted(rank0["losses"], key=int) == ["7", "8"]  # only the steps after the checkpoint
    # The same world size and the same reductions: the resumed run continues the very same curve.
    assert max_abs_difference({k: uninterrupted["losses"][k] for k in rank0["losses"]}, rank0["losses"]) < 1e-6
    assert rank0["result"]["final_train_loss"] == pytest.approx(uninterrupted["result"]["final_train_loss"], abs=1e-6)


@pytest.mark.parametrize("parallelism", ["ddp", "fsdp"])
@pytest.mark.slow
def test_two_workers_resume_a_one_worker_checkpoint(two_workers, resumed, parallelism):
    """The full tensors of `trainer.pt` load into replicated (DDP) and sharded (FSDP) workers alike."""
    rank0, uninterrupted = resumed["from_one_worker"][parallelism], two_workers[parallelism][0]
    assert rank0["result"]["resumed_from"] == KILLED_AFTER
    assert sorted(rank0["losses"], key=int) == ["7", "8"]
    same_steps = {k: uninterrupted["losses"][k] for k in rank0["losses"]}
    assert max_abs_difference(same_steps, rank0["losses"]) < LOSS_TOLERANCE


@pytest.mark.slow
def test_one_worker_resumes_a_two_worker_checkpoint(two_workers, one_worker, checkpoint_root):
    """DCP reshards on load: the two ranks' FSDP shards load into one unsharded model and optimizer."""
    resumed = run_job(CONFIG, checkpoint_dir=str(checkpoint_root / "for_one_worker"), checkpoint_every=CHECKPOINT_EVERY)
    assert resumed["result"]["resumed_from"] == KILLED_AFTER
    steps_after = {k: one_worker["losses"][k] for k in resumed["losses"]}
    assert len(steps_after) == 2 and max_abs_difference(steps_after, resumed["losses"]) < LOSS_TOLERANCE
    assert resumed["result"]["final_train_loss"] == pytest.approx(one_worker["result"]["final_train_loss"],
                                                                  abs=LOSS_TOLERANCE)
    assert (checkpoint_root / "for_one_worker" / "trainer.pt").is_file()  # one worker writes its own format again
    assert not (checkpoint_root / "for_one_worker" / "sharded").exists()


@pytest.mark.slow
def test_a_ddp_checkpoint_holds_the_trained_model(two_workers, checkpoint_root):
    """DDP's replicated state, written once through DCP, loads into one worker: resuming the finished run
    trains nothing and evaluates the same model."""
    trained = two_workers["ddp"][0]["result"]
    resumed = run_job(CONFIG, checkpoint_dir=str(checkpoint_root / "ddp"))
    assert resumed["result"]["resumed_from"] == CONFIG["train"]["steps"] and resumed["losses"] == {}
    assert resumed["result"]["final_train_loss"] == trained["final_train_loss"]
    for length, value in trained["perplexity"].items():
        assert resumed["result"]["perplexity"][length] == pytest.approx(value, rel=PPL_RELATIVE_TOLERANCE)


def test_each_rank_reads_its_own_rows_of_the_same_global_batch():
    rng = np.random.default_rng(0)
    regions = [rng.integers(1, 256, size=n).astype(np.uint8) for n in (500, 90, 2000)]
    whole = TrainStream(regions, 16, seed=3)
    ranks = [TrainStream(regions, 16, seed=3, rank=r, world_size=4) for r in range(4)]
    for _ in range(3):
        expected = whole.batch(8).inputs
        parts = [stream.batch(2).inputs for stream in ranks]
        assert torch.equal(torch.cat(parts), expected)
    states = [stream.state_dict()["generator"] for stream in ranks]
    assert all(torch.equal(state, whole.state_dict()["generator"]) for state in states)  # resumable on any world


def test_fsdp_shards_blocks_on_their_own_unless_they_share_parameters():
    """T5's one bias table belongs to every block; a parameter may belong to one FSDP group only, so such a
    model is sharded at the root alone."""
    from dape_core import ModelConfig, build_model
    from dape_core.train.distributed import _shares_parameters

    blocks = lambda encoding: list(build_model(ModelConfig(preset="tiny", pos_encoding=encoding)).blocks)  # noqa: E731
    assert _shares_parameters(blocks("t5")) and not _shares_parameters(blocks("kerple"))


def test_distributed_settings_are_checked_with_their_fields():
    with pytest.raises(ValidationError, match=r"train.batch_size=6 does not split into distributed.workers=2 x "
                                              r"train.grad_accum=2"):
        ExperimentConfig(train={"batch_size": 6, "grad_accum": 2}, distributed={"workers": 2})
    with pytest.raises(ValidationError, match="fp16 is not supported with distributed.parallelism fsdp"):
        ExperimentConfig(train={"precision": "fp16"}, distributed={"workers": 2, "parallelism": "fsdp"})
    with pytest.raises(ValidationError, match="CHE and associative-recall trials train on one worker"):
        ExperimentConfig(che={"task": "parity_check"}, distributed={"workers": 2})
    with pytest.raises(ValidationError) as error:
        ExperimentConfig(distributed={"workers": 2, "parallelism": "zero3"})
    assert error.value.errors()[0]["loc"] == ("distributed", "parallelism")
    # The world size is how the run is computed, not what it computes: the checkpoint fingerprint ignores it.
    assert ExperimentConfig(distributed={"workers": 4}).fingerprint() == ExperimentConfig().fingerprint()


def test_a_multi_worker_config_outside_a_process_group_is_refused():
    with pytest.raises(RuntimeError, match="distributed.workers is 2 but no torch.distributed process group"):
        run_experiment(ExperimentConfig(**with_workers(CONFIG, 2)))

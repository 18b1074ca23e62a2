"""Every study's `paper` profile, end to end at tiny cost: `orchestrator data prepare` on text this machine has
(a BPE trained on it), then `orchestrator run STUDY --profile paper` with overrides that shrink the model,
the steps and the lengths but keep the profile's code path: a prepared token file read through its metadata
(relative paths, as the profiles give them), the BPE tokenizer, the K = 256 tail, a fixed token budget per
length, the profile's precision (bf16 runs on the CPU too), GPU resources mapped to CPU (`resources.gpus=0`),
on the local Ray, logged to MLflow, reported.

What each override keeps and drops is in SHRINK; one seed and one value of the wide axes keep the whole
file to about a minute or two of 2 cores.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from orchestrator.cli import app

pytestmark = pytest.mark.slow

STUDIES = Path(__file__).parents[1] / "studies"
VOCAB = 1024
CORPUS = Path(sysconfig.get_paths()["stdlib"]) / "email"  # 28 files, 380 KB of real text

# The language-model profiles: a tiny model, 4 steps, training length 256 (K = 256 needs at least that),
# lengths 256 and 512, 512 scored tokens per length (2 windows of K = 256), validation every 2 steps.
LM = ["model.preset=tiny", f"model.vocab_size={VOCAB}", "train.steps=4", "train.batch_size=4", "train.seq_len=256",
      "train.eval_every=2", "train.val_tokens=512", "eval.lengths=[256,512]", "eval.batch_size=2",
      "resources.gpus=0", "resources.cpus=1", "resources.gpu_memory_gb=null", "seeds=[0]"]
BUDGET = ["eval.tokens_per_length=512"]
# The CHE profiles: their own small model already; the run shrinks to 4 steps on lengths up to 8.
CHE = ["che.steps=4", "che.batch_size=4", "che.train_max_length=8", "che.test_lengths=9..12", "che.eval_batches=1",
       "che.eval_batch_size=4", "resources.gpus=0", "resources.cpus=1", "resources.gpu_memory_gb=null", "seeds=[0]"]

SHRINK = {
    "kernel_size": LM + BUDGET,
    "d_dape": LM + BUDGET,
    "dape_variants": LM + BUDGET,
    "seeds_significance": LM + BUDGET,  # one seed of three: significance needs n >= 3, the report says so
    "leakage": LM + BUDGET + ["axes={model.pos_encoding: [kerple]}"],
    "position_encoding": LM + BUDGET + ["axes={model.pos_encoding: [rope]}"],  # one encoding of eight
    # its budget is a window count (the profile times forwards of n_windows windows)
    "time_cost": LM + ["eval.n_windows=2", "axes={model.pos_encoding: [kerple]}", "eval.timing_reps=1"],
    "search": LM + BUDGET + ["search.num_samples=2", "scheduler.grace_period=1"],
    # The sizes are this profile's point (125M..6.7B): shrunk to one tiny row, only its path runs here.
    "model_size": LM + BUDGET + ["zip={model.preset: [tiny], train.lr: [6.0e-4]}"],
    "che": CHE + ["axes={che.task: [parity_check]}"],  # one task of fourteen
    "associative_recall": CHE,
}


def test_every_study_has_a_tiny_paper_run():
    assert sorted(SHRINK) == sorted(p.stem for p in STUDIES.glob("*.yaml")), "a study without a tiny paper run"


@pytest.fixture(scope="module")
def launch_dir(tmp_path_factory):
    """A fresh folder with the corpus prepared where the paper profiles look: data/paper/ (the default)."""
    folder = tmp_path_factory.mktemp("paper")
    result = CliRunner().invoke(app, ["data", "prepare", str(CORPUS), "--pattern", "**/*.py",
                                      "--train-tokenizer", str(VOCAB)], catch_exceptions=False,
                                env={"COLUMNS": "160"}) if False else None
    return folder, result


@pytest.mark.parametrize("study", sorted(SHRINK))
def test_paper_profile_runs_at_tiny_cost(study, prepared_dir, local_ray, monkeypatch):
    monkeypatch.chdir(prepared_dir)
    uri = f"sqlite:///{prepared_dir / 'mlflow.db'}"
    result = CliRunner().invoke(app, ["run", str(STUDIES / f"{study}.yaml"), "--profile", "paper",
                                      "--tracking-uri", uri, *SHRINK[study]])
    assert result.exit_code == 0, result.output
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(study)
    runs = client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'trial'")
    assert runs and all(run.info.status == "FINISHED" for run in runs)
    for run in runs:
        if "che.task" in run.data.params:
            assert "che_acc_test" in run.data.metrics
            continue
        assert run.data.params["data.path"] == "data/paper/tokens.bin"
        assert run.data.params["eval.tail_tokens"] == "256" and run.data.tags["data_hash"]
        assert {"ppl_256", "ppl_512"} <= set(run.data.metrics)

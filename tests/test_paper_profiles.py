"""Every study's `paper` profile, end to end at tiny cost: `orchestrator data prepare` on text this machine has
(a BPE trained on it), then `orchestrator run STUDY --profile paper` with overrides that shrink the model,
the steps and the lengths but keep the profile's code path: a prepared token file read through its metadata
(relative paths, as the profiles give them), the BPE tokenizer, the K = 256 tail, a fixed token budget per
length, the profile's precision (bf16 runs on the CPU too), GPU resources mapped to CPU (`resources.gpus=0`),
on the local Ray, logged to MLflow, reported.

What each override keeps and drops is in SHRINK; one seed, one value of the wide axes and two rows of each
study (its baseline and its last variant) keep the whole file small: 26 trials.

The studies' `expect:` claims are dropped here (`expect=[]`): they name every variant and lengths up to 8x the
training length (2048 tokens at K = 256), and validation refuses a claim whose rows or lengths are not run.
Keeping them would mean about 52 trials evaluated up to 2048 tokens: measured here, kernel_size's 5 rows at
lengths 256..2048 took 648 s with `--local` on 2 busy cores (70% of it evaluation), against about a minute a
trial now. The claims themselves are validated and judged by the default-profile tests.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

from orchestrator.cli import app

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # a trial takes about a minute here

STUDIES = Path(__file__).parents[1] / "studies"
VOCAB = 1024
CORPUS = Path(sysconfig.get_paths()["stdlib"]) / "email"  # 28 files, 380 KB of real text

# The language-model profiles: a tiny model cut to one layer, 4 steps of batch 2 (bf16 on a CPU without bf16
# arithmetic costs 4-5x float32: a 1x7 DAPE layer's step at T = 256 took 4.3 s at two layers and batch 4),
# training length 256 (K = 256 needs at least that), lengths 256 and 512, 512 scored tokens per length (2 windows
# of K = 256), validation every 2 steps.
LM = ["model.preset=tiny", "model.n_layer=1", f"model.vocab_size={VOCAB}", "train.steps=4", "train.batch_size=2",
      "train.seq_len=256", "train.eval_every=2", "train.val_tokens=512", "eval.lengths=[256,512]", "eval.batch_size=2",
      "resources.gpus=0", "resources.cpus=1", "resources.gpu_memory_gb=null", "seeds=[0]", "expect=[]",
      "decide=null", "published={}"]  # no claims to decide here; the papers' values are at lengths not run
BUDGET = ["eval.tokens_per_length=512"]
# The CHE profiles: their own small model already; the run shrinks to 4 steps on lengths up to 8.
CHE = ["che.steps=4", "che.batch_size=4", "che.train_max_length=8", "che.test_lengths=9..12", "che.eval_batches=1",
       "che.eval_batch_size=4", "resources.gpus=0", "resources.cpus=1", "resources.gpu_memory_gb=null", "seeds=[0]",
       "expect=[]", "decide=null", "published={}"]

SHRINK = {
    "kernel_size": LM + BUDGET + ["report.lengths=[]"],  # 16x = 4096 here: `run` would evaluate it (not the point)
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
    # two of its three training lengths, each with its K (the papers' 256, and 128 at 128, the longest that fits)
    "training_length": LM + BUDGET + ["zip={train.seq_len: [128, 256], train.batch_size: [2, 1], "
                                      "eval.tail_tokens: [128, 256], eval.lengths: [[128, 256], [256, 512]]}"],
    "che": CHE + ["axes={che.task: [parity_check]}"],  # one task of fourteen
    "associative_recall": CHE,
}


def _two_rows(study: str) -> list[str]:
    """The study's baseline and its last variant: the profile's code path is the same for every row, and the
    rows' own code paths (processors, forms, encodings) are what the default-profile tests run."""
    variants = yaml.safe_load((STUDIES / f"{study}.yaml").read_text()).get("variants", [])
    if len(variants) <= 2:
        return []
    kept = [next(v for v in variants if v.get("baseline")), variants[-1]]
    return ["variants=" + yaml.safe_dump(kept, default_flow_style=True, width=10_000).strip()]


def test_every_study_has_a_tiny_paper_run():
    assert sorted(SHRINK) == sorted(p.stem for p in STUDIES.glob("*.yaml")), "a study without a tiny paper run"


@pytest.fixture(scope="module")
def prepared_dir(tmp_path_factory):
    """A fresh folder with the corpus prepared where the paper profiles look, data/paper/ (the default), by
    the command a user runs: a BPE of VOCAB entries trained on the corpus, the default split."""
    folder = tmp_path_factory.mktemp("paper")
    result = CliRunner().invoke(app, ["data", "prepare", str(CORPUS), "--pattern", "**/*.py", "--train-tokenizer",
                                      str(VOCAB), "--output", str(folder / "data" / "paper"), "--quiet"])
    assert result.exit_code == 0, result.output
    return folder


@pytest.mark.parametrize("study", sorted(SHRINK))
def test_paper_profile_runs_at_tiny_cost(study, prepared_dir, local_ray, monkeypatch):
    monkeypatch.chdir(prepared_dir)  # the profiles' data paths are relative to where `orchestrator run` starts
    # a store of its own: in a shared one, a trial another study finished is reused, and this study's path not run
    uri = f"sqlite:///{prepared_dir / f'{study}.db'}"
    result = CliRunner().invoke(app, ["run", str(STUDIES / f"{study}.yaml"), "--profile", "paper",
                                      "--tracking-uri", uri, *SHRINK[study], *_two_rows(study)])
    assert result.exit_code == 0, result.output
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(study)
    runs = client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'trial'")
    assert runs and all(run.info.status == "FINISHED" for run in runs)
    # search: ASHA may stop one of its two samples at its first report (validation only, no evaluation)
    stopped = [run for run in runs if run.data.tags.get("stopped_early") == "true"]
    assert all("val_loss" in run.data.metrics for run in stopped) and len(stopped) < len(runs)
    for run in runs:
        params, metrics = run.data.params, run.data.metrics
        if params.get("che.task", "None") != "None":
            assert "che_acc_test" in metrics
            continue
        if run in stopped:
            continue
        assert params["data.path"] == "data/paper/tokens.bin"
        assert params["data.tokenizer"] == "data/paper/tokenizer.json"
        # the papers' K = 256, and at a training length below it (training_length's 128) the length itself
        assert params["eval.tail_tokens"] == str(min(256, int(params["train.seq_len"])))
        assert params["train.precision"] == "bf16" and run.data.tags["device"] == "cpu"  # bf16 autocast on the CPU
        assert "ppl_256" in metrics and 1 < metrics["ppl_256"] < 10 * VOCAB


def test_a_paper_profile_without_its_data_stops_before_launching(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["run", str(STUDIES / "kernel_size.yaml"), "--profile", "paper",
                                      "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", *SHRINK["kernel_size"]])
    assert result.exit_code == 2, result.output
    assert "Invalid study" in result.output  # one check, at validation, with the other problems of the study
    assert f"base.data.path: no token file at data/paper/tokens.bin (relative to {tmp_path})" in result.output
    assert "prepare it with `orchestrator data prepare CORPUS --output data/paper`" in result.output
    assert "base.data.tokenizer: no tokenizer file at data/paper/tokenizer.json" in result.output
    assert not (tmp_path / "mlflow.db").exists()  # nothing created


def test_a_corpus_prepared_with_another_split_is_named_before_launching(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.txt").write_text("one document\n" * 50)
    (tmp_path / "c.txt").write_text("another document\n" * 50)  # its key's hash puts it in validation
    prepared = CliRunner().invoke(app, ["data", "prepare", "a.txt", "c.txt", "--val-fraction", "0.5", "--quiet"])
    assert prepared.exit_code == 0, prepared.output
    result = CliRunner().invoke(app, ["run", str(STUDIES / "kernel_size.yaml"), "--profile", "paper",
                                      *SHRINK["kernel_size"]])
    assert result.exit_code == 2, result.output
    assert "Invalid study" in result.output and not (tmp_path / "mlruns").exists()
    assert "base.data.val_fraction is 0.1 but" in result.output and "set data.val_fraction: 0.5" in result.output
    assert "set data.tokenizer: byte" in result.output

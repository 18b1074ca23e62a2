"""Provenance: which code (MLflow's own mlflow.source.* tags, a dirty flag and the uncommitted diff's hash),
software and hardware (the trial process's env.* tags) produced each run, in the report's header too; and
`trial_config.yaml`, resolved to the device and precision the trial ran on, reruns it bit for bit on CPU
through `orchestrator run` (a tiny real study through Ray Tune into SQLite, then its file run again)."""

import subprocess

import mlflow.utils.mlflow_tags as mlflow_tags
import pytest
import yaml
from mlflow.tracking import MlflowClient
from typer.testing import CliRunner

import dape_core.metric_names as names
from dape_core.environment import cpu_model, describe_environment
from orchestrator import parse_study
from orchestrator.cli import app
from orchestrator.tracking import source
from orchestrator.tracking.source import code_source

CONTRACT = ["python", "platform", "torch", "torch_cuda", "cudnn", "triton", "ray", "mlflow", "optuna", "pydantic",
            "numpy", "cuda_driver", "device", "device_model", "device_memory_gb", "gpu_count", "torch_threads",
            "cpu_count"]
STUDY = {
    "name": "tiny_provenance",
    "description": "Provenance test: one DAPE 1x3 trial over Kerple.",
    "base": {
        "model": {"preset": "tiny", "pos_encoding": "kerple", "d_dape": 8, "processor": "dapev2", "kernel_size": 3},
        "data": {"max_files": 200},
        "train": {"steps": 12, "batch_size": 4, "seq_len": 32, "log_every": 4},
        "eval": {"lengths": [32, 64], "tail_tokens": 16, "n_windows": 4},
    },
    "variants": [{"label": "DAPE1x3-Kerple"}],
    "seeds": [3],
    "resources": {"cpus": 1, "max_retries": 0},
}


def test_the_environment_has_the_contracts_keys_as_text():
    import torch

    facts = describe_environment("cpu")
    assert list(facts) == CONTRACT and all(isinstance(v, str) and v for v in facts.values())
    assert facts["torch"] == torch.__version__ and facts["device"] == "cpu"
    assert facts["device_model"] == cpu_model() and facts["device_memory_gb"] == "n/a"
    assert facts["torch_threads"] == str(torch.get_num_threads())
    assert facts["pydantic"] not in ("absent", "") and facts["mlflow"] not in ("absent", "")


def test_source_tags_are_mlflows_own():
    assert (source.SOURCE_NAME_TAG, source.SOURCE_TYPE_TAG, source.GIT_COMMIT_TAG, source.GIT_BRANCH_TAG,
            source.GIT_DIRTY_TAG, source.GIT_REPO_URL_TAG) == (
        mlflow_tags.MLFLOW_SOURCE_NAME, mlflow_tags.MLFLOW_SOURCE_TYPE, mlflow_tags.MLFLOW_GIT_COMMIT,
        mlflow_tags.MLFLOW_GIT_BRANCH, mlflow_tags.MLFLOW_GIT_DIRTY, mlflow_tags.MLFLOW_GIT_REPO_URL)
    from mlflow.entities import SourceType

    assert SourceType.from_string(source.SOURCE_TYPE) == SourceType.LOCAL


def _git(folder, *args):
    subprocess.run(["git", *args], cwd=folder, check=True, capture_output=True)


def test_a_dirty_checkout_is_flagged_with_the_hash_of_its_changes(tmp_path):
    repo = tmp_path / "repo"
    (repo / "studies").mkdir(parents=True)
    (repo / "code.py").write_text("x = 1\n")
    (repo / "studies" / "s.yaml").write_text("name: s\n")
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "x", "--allow-empty")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "first")
    _git(repo, "remote", "add", "origin", "https://example.invalid/repo.git")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()

    clean = code_source(repo)
    tags = clean.tags(repo / "studies" / "s.yaml")
    assert tags == {"mlflow.source.name": "studies/s.yaml", "mlflow.source.type": "LOCAL",
                    "mlflow.source.git.commit": commit, "mlflow.source.git.dirty": "false",
                    "mlflow.source.git.branch": "main", "mlflow.source.git.repoURL": "https://example.invalid/repo.git",
                    "code_version": commit[:7]}

    (repo / "code.py").write_text("x = 2\n")
    edited = code_source(repo)
    assert edited.dirty and edited.version == f"{commit[:7]}-dirty-{edited.diff_sha256[:8]}"
    assert edited.tags()["code_diff_sha256"] == edited.diff_sha256 and "+x = 2" in edited.diff
    (repo / "code.py").write_text("x = 3\n")
    assert code_source(repo).diff_sha256 != edited.diff_sha256  # another change, another hash
    (repo / "code.py").write_text("x = 2\n")
    assert code_source(repo).diff_sha256 == edited.diff_sha256  # the same change, the same hash
    (repo / "new_module.py").write_text("y = 1\n")  # an untracked file is code too
    with_new = code_source(repo)
    assert with_new.diff_sha256 != edited.diff_sha256 and "untracked: new_module.py" in with_new.diff
    # The diff recreates the checkout: applied to a clean copy of the commit, it gives the same files.
    copy = tmp_path / "copy"
    _git(tmp_path, "clone", "-q", str(repo), str(copy))
    (tmp_path / "changes.diff").write_text(with_new.diff)
    _git(copy, "apply", str(tmp_path / "changes.diff"))
    assert (copy / "code.py").read_text() == "x = 2\n" and (copy / "new_module.py").read_text() == "y = 1\n"

    outside = code_source(tmp_path)  # not a checkout
    assert outside.commit == "unknown" and not outside.dirty and outside.version.startswith("unknown")


@pytest.fixture(scope="module")
def ran(tmp_path_factory, local_ray):
    from orchestrator.run import run_and_report
    from orchestrator.run_context import RunContext

    root = tmp_path_factory.mktemp("provenance_study")
    study_file = root / "tiny_provenance.yaml"
    study_file.write_text(yaml.safe_dump(STUDY, sort_keys=False))
    uri = f"sqlite:///{root / 'mlflow.db'}"
    outcome = run_and_report(RunContext.create(parse_study(STUDY), uri, storage_dir=root / "state",
                                               study_path=study_file), root / "reports")
    assert outcome.ok, outcome.failed
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("tiny_provenance")
    (trial,) = client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'trial'")
    (parent,) = client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'study'")
    return root, uri, client, trial, parent, outcome


@pytest.mark.slow
def test_parent_and_trial_runs_carry_mlflows_source_tags(ran):
    _, _, _, trial, parent, _ = ran
    expected = code_source()
    for run in (trial, parent):
        tags = run.data.tags
        assert tags[mlflow_tags.MLFLOW_GIT_COMMIT] == expected.commit
        assert len(expected.commit) == 40 or expected.commit == "unknown"  # a checkout, or an installed copy
        assert tags[mlflow_tags.MLFLOW_SOURCE_TYPE] == "LOCAL"
        assert tags[mlflow_tags.MLFLOW_SOURCE_NAME].endswith("tiny_provenance.yaml")
        assert tags[mlflow_tags.MLFLOW_GIT_DIRTY] == str(expected.dirty).lower()
        assert tags["code_version"] == expected.version
        assert tags.get("code_diff_sha256", "") == expected.diff_sha256
    # A dirty checkout (as while developing) leaves its changes on the parent run; a clean one (CI) has none.
    client = ran[2]
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert ("uncommitted.diff" in artifacts) == expected.dirty


@pytest.mark.slow
def test_every_environment_field_is_on_the_trial_run_as_the_trial_used_it(ran):
    root, _, _, trial, _, outcome = ran
    tags = trial.data.tags
    env = {key.removeprefix("env."): value for key, value in tags.items() if key.startswith("env.")}
    assert list(env) == CONTRACT or set(env) == set(CONTRACT)
    here = describe_environment("cpu")
    for key in ("python", "torch", "triton", "ray", "mlflow", "optuna", "pydantic", "numpy", "cuda_driver",
                "device_model", "cpu_count"):
        assert env[key] == here[key], key
    # The trial's process: resources.cpus = 1 gave it one torch thread, whatever this process has.
    assert env["torch_threads"] == "1" and env["device"] == "cpu" == tags["device"]
    report = (root / "reports" / "tiny_provenance" / "report.md").read_text()
    # The setup above Table 1 names the device once, with its hardware; the provenance is a section after it.
    setup = report[:report.index("## Perplexity")]
    assert setup.count("- device: ") == 1 and f"- device: cpu: {here['device_model']}" in setup
    section = report[report.index("## Provenance"):]
    assert report.index("## Perplexity") < report.index("## Provenance")
    for name, key in (("torch", "torch"), ("Ray", "ray"), ("MLflow", "mlflow"), ("Optuna", "optuna"),
                      ("Triton", "triton")):
        assert f"{name} {here[key]}" in section, name
    assert "torch threads per trial: 1" in section and "- device" not in section
    assert f"code version: {code_source().version}" in section
    html = (root / "reports" / "tiny_provenance" / "report.html").read_text()
    assert "torch threads per trial" in html and here["device_model"] in html


@pytest.mark.slow
def test_trial_config_is_resolved_and_reruns_bit_identically(ran, tmp_path):
    _, uri, client, trial, _, _ = ran
    folder = client.download_artifacts(trial.info.run_id, "trial_config.yaml", str(tmp_path))
    text = open(folder).read()
    study = yaml.safe_load(text)
    assert study["base"]["train"]["device"] == "cpu" and study["base"]["train"]["precision"] == "fp32"
    assert "asked for auto / auto" in text
    rerun_file = tmp_path / "trial_config.yaml"
    rerun_file.write_text(text)
    rerun_uri = f"sqlite:///{tmp_path / 'rerun.db'}"
    result = CliRunner().invoke(app, ["run", str(rerun_file), "--tracking-uri", rerun_uri, "--reports-dir",
                                      str(tmp_path / "reports"), "--storage-dir", str(tmp_path / "state")])
    assert result.exit_code == 0, result.output
    again_client = MlflowClient(rerun_uri)
    experiment = again_client.get_experiment_by_name(study["name"])
    (again,) = again_client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'trial'")
    def computed(metrics):  # all but the timings, the memory peak and what the hardware did: measured, not computed
        return {k: v for k, v in metrics.items()
                if not k.startswith(("ms_", names.SYSTEM_PREFIX)) and not k.endswith("_seconds")
                and k not in ("peak_memory_mb", *names.SYSTEM_MEANS)}

    first, second = computed(trial.data.metrics), computed(again.data.metrics)
    assert first == second and any(k.startswith("ppl_") for k in first)  # bit for bit: == on floats
    for key in ("train_loss", "ppl_by_length"):
        assert [(m.step, m.value) for m in client.get_metric_history(trial.info.run_id, key)] == \
            [(m.step, m.value) for m in again_client.get_metric_history(again.info.run_id, key)]
    same = ("train.device", "train.precision", "model.kernel_size", "train.seed", "train.steps")
    assert {k: again.data.params[k] for k in same} == {k: trial.data.params[k] for k in same}


def test_only_an_auto_device_or_precision_is_replaced_by_what_ran():
    from orchestrator.tracking.run_files import ran_config

    auto = {"model": {}, "train": {"device": "auto", "precision": "auto", "steps": 3}}
    # A GPU is named without its index: each trial (each rank) sees its own GPU as the current one.
    assert ran_config(auto, {"device": "cuda:0", "precision": "bf16"})["train"] == {
        "device": "cuda", "precision": "bf16", "steps": 3}
    assert ran_config(auto, {"device": "cpu", "precision": "fp32"})["train"]["device"] == "cpu"
    chosen = {"train": {"device": "cuda:1", "precision": "fp16"}}
    assert ran_config(chosen, {"device": "cuda:1", "precision": "fp16"}) == chosen  # asked for: kept as asked
    assert ran_config(auto, None) is auto and auto["train"]["device"] == "auto"  # not finished: as asked, unchanged


def test_the_header_lists_every_value_and_says_what_older_runs_did_not_record():
    import pandas as pd

    from orchestrator.reporting.provenance import provenance

    env = {f"env.{key}": value for key, value in describe_environment("cpu").items()}
    trials = pd.DataFrame([
        {"status": "FINISHED", "code_version": "abc1234", "data_hash": "d1", "device": "cpu", **env,
         "env.torch_threads": "1"},
        {"status": "FINISHED", "code_version": "abc1234-dirty-0123abcd", "data_hash": "d1", "device": "cpu",
         **env, "env.torch_threads": "2"},
        {"status": "FINISHED", "code_version": "0ld0ld0", "data_hash": "d1", "device": "cpu"},  # before env.*
        {"status": "RUNNING", "code_version": "abc1234", "data_hash": None, "device": None},  # no numbers yet
    ])
    facts = dict(provenance(trials))
    assert facts["code version"].startswith("0ld0ld0 | abc1234 | abc1234-dirty-0123abcd (differs between trials")
    assert "uncommitted.diff" in facts["code version"] and facts["data hash"] == "d1"
    threads = facts["torch threads per trial"]
    assert threads.startswith("1 | 2 (differs") and threads.endswith("1 run(s): not recorded")
    assert facts["CUDA"].startswith("none (a CPU build of torch)")
    old = dict(provenance(trials.iloc[2:3]))
    assert old["software"] == "not recorded (runs from before it was recorded)"

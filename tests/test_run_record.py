"""What a trial's MLflow run records, on a tiny real grid study (no processor and DAPE over NoPE and Kerple,
through Ray Tune into SQLite): every param is the value the trial used, checked against the model built from
the study file and against what the run itself measured; settings a trial does not read are not logged; the run
carries its config as a rerunnable study file, its log and its data as dataset inputs; the experiment
carries the dashboard the UI opens; the SQLite reader returns what MLflow's client returns."""

import json
import math
import os
import subprocess
import sys

import pytest
import report_study
import yaml
from mlflow.tracking import MlflowClient

from dape_core import ExperimentConfig, build_model
from dape_core.applicability import unused_settings
from orchestrator import expand, parse_study
from orchestrator.tracking import dashboard
from orchestrator.tracking.params import NOT_APPLICABLE, flatten
from orchestrator.tracking.readers import ClientReader, SQLiteReader
from orchestrator.tracking.store import TRIAL_ID_TAG
from orchestrator.tracking.uri import sqlite_path

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # the first test runs the module's study

ENCODING_CLASSES = {"NoPE": "nope", "KerpleLog": "kerple"}


@pytest.fixture(scope="module")
def grid(tmp_path_factory, local_ray):
    return report_study.build_grid(tmp_path_factory.getbasetemp() / "tiny_grid_study")


def _runs(built):
    client = MlflowClient(built.tracking_uri)
    experiment = client.get_experiment_by_name(built.study.name)
    return client, experiment, client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'trial'")


def _used_by_model(cfg: ExperimentConfig) -> dict:
    """What the model built from the study file's config has, read from its modules."""
    model = build_model(cfg.model)
    block = model.blocks[0]
    used = {"model.n_layer": len(model.blocks), "model.d_model": model.embed.embedding_dim,
            "model.vocab_size": model.embed.num_embeddings, "model.n_head": block.attn.n_head,
            "model.mlp_ratio": block.mlp[0].out_features // model.embed.embedding_dim,
            "model.causal": block.attn.causal, "model.eval_block_size": block.attn.eval_block_rows,
            "model.pos_encoding": ENCODING_CLASSES[type(block.attn.pos).__name__]}
    processor = block.attn.processor
    used["model.processor"] = "none" if processor is None else cfg.model.processor
    if processor is not None:
        used.update({"model.d_dape": processor.conv_in.out_channels, "model.leak": processor.leak,
                     "model.attention_block_size": block.attn.train_block_rows})
    return used


def test_every_logged_param_is_the_value_the_trial_used(grid):
    client, _, runs = _runs(grid)
    expected = {trial.trial_id: trial for trial in expand(parse_study(report_study.GRID))}
    assert len(runs) == 4
    for run in runs:
        params, metrics = run.data.params, run.data.metrics
        cfg = ExperimentConfig(**expected[run.data.tags[TRIAL_ID_TAG]].config)
        resolved = flatten(cfg.to_dict())
        unused = unused_settings(cfg)
        # Every setting the trial reads is logged, and only those: the config's fields with a value, the device
        # and the precision; none it does not read (no "n/a" crowding MLflow's compare view).
        assert set(params) == {key for key, value in resolved.items() if value is not None and key not in unused}
        for key, value in params.items():
            assert value not in (NOT_APPLICABLE, "None"), key
            if key in ("train.device", "train.precision"):
                continue  # "auto" in the config: the run logs what it resolved (below)
            else:
                assert value == str(resolved[key]), key
        # ... and the model's own modules agree with the logged values.
        for key, value in _used_by_model(cfg).items():
            assert params.get(key) == (None if value is None else str(value)), key  # None: not logged
        if cfg.model.processor == "none":  # no processor: its settings are not presented as if used
            assert not {"model.kernel_size", "model.d_dape", "model.form", "model.leak"} & set(params)
        assert metrics["num_parameters"] == build_model(cfg.model).num_parameters()
        # What the trial measured while running says the same as the params.
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "train_loss")]
        assert max(steps) == int(params["train.steps"]) == 20
        assert metrics["tokens_seen"] == (int(params["train.steps"]) * int(params["train.batch_size"])
                                          * int(params["train.seq_len"]))
        assert params["model.train_length"] == params["train.seq_len"] == "32"  # the effective training length
        lengths = sorted(m.step for m in client.get_metric_history(run.info.run_id, "ppl_by_length"))
        assert str(lengths) == params["eval.lengths"]
        assert (params["train.device"], params["train.precision"]) == ("cpu", "fp32") == \
            (run.data.tags["device"], run.data.tags["precision"])


def test_results_csv_has_the_logged_params(grid):
    import pandas as pd

    _, _, runs = _runs(grid)
    # "n/a" marks a setting the trial does not read; pandas would read it as a missing value (README).
    csv = pd.read_csv(grid.report_dir / "results.csv", keep_default_na=False).set_index("run_id")
    for run in runs:
        for key in ("model.kernel_size", "model.d_dape", "model.train_length", "train.device"):
            if f"config.{key}" not in csv.columns:  # logged by no run (no trial reads it): no column
                assert all(key not in other.data.params for other in runs), key
                continue
            assert str(csv.loc[run.info.run_id, f"config.{key}"]) == run.data.params.get(key, NOT_APPLICABLE)


def test_runs_carry_a_rerunnable_config_their_log_and_their_data(grid, tmp_path):
    client, _, runs = _runs(grid)
    expected = {trial.trial_id: trial for trial in expand(parse_study(report_study.GRID))}
    for run in runs:
        files = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"trial_config.yaml", "trial.log"} <= files
        folder = client.download_artifacts(run.info.run_id, "", str(tmp_path / run.info.run_id))
        config_text = open(f"{folder}/trial_config.yaml").read()
        assert "orchestrator run trial_config.yaml" in config_text
        # The file is a study whose one trial is this one, with the device and precision it ran on (the study
        # asked for "auto"): the same config otherwise.
        rerun = expand(parse_study(yaml.safe_load(config_text)))
        asked = expected[run.data.tags[TRIAL_ID_TAG]].config
        assert len(rerun) == 1 and rerun[0].config == {**asked, "train": {**asked["train"], "device": "cpu",
                                                                          "precision": "fp32"}}
        log = open(f"{folder}/trial.log").read()
        assert "step 20/20  train_loss" in log and "finished on cpu (fp32)" in log and "ppl_128" in log
        inputs = client.get_run(run.info.run_id).inputs.dataset_inputs
        by_context = {i.tags[0].value: i.dataset for i in inputs}
        assert set(by_context) == {"training", "evaluation"}
        assert {d.digest for d in by_context.values()} == {run.data.tags["data_hash"]}
        assert by_context["training"].name == "stdlib:train" and by_context["evaluation"].name == "stdlib:validation"
        assert json.loads(by_context["training"].profile)["tokens"] > 0


def test_the_experiment_carries_the_dashboard_the_ui_opens(grid):
    _, experiment, runs = _runs(grid)
    tags = experiment.tags
    assert tags[dashboard.EXPERIMENT_KIND_TAG] == dashboard.TRAINING_KIND
    envelope = json.loads(tags[dashboard.VIEW_TAG_PREFIX + dashboard.VIEW_KEY])
    state = json.loads(envelope["state"])
    assert state["searchFilter"] == dashboard.TRIAL_FILTER and state["runsHiddenMode"] == "SHOW_ALL"
    assert state["orderByKey"] == "metrics.`ppl_128`" and state["orderByAsc"] is True  # best first, not nested
    shown = [c.get("metricKey") for c in state["compareRunCharts"] if not c["deleted"]]
    assert shown == ["ppl_by_length", "delta_p_by_length", "train_loss", "ppl_128", None]  # None: parallel coords
    parallel = next(c for c in state["compareRunCharts"] if c["type"] == "PARALLEL")
    assert parallel["selectedParams"] == ["model.pos_encoding", "model.processor"]
    hidden = {c["metricKey"] for c in state["compareRunCharts"] if c["deleted"]}
    logged = set().union(*(run.data.metrics for run in runs))
    assert hidden == logged - set(shown)  # every other metric has its chart, deleted: MLflow adds no other


def test_sqlite_reader_returns_what_mlflows_client_returns(grid):
    client, experiment, _ = _runs(grid)
    fast, slow = SQLiteReader(sqlite_path(grid.tracking_uri)), ClientReader(client)
    assert fast.experiment("tiny_grid") == slow.experiment("tiny_grid")
    assert fast.experiment("no_such_study") is None is slow.experiment("no_such_study")
    for role in ("trial", "study"):
        ours = fast.runs(experiment.experiment_id, "orchestrator.role", role)
        theirs = slow.runs(experiment.experiment_id, "orchestrator.role", role)
        assert [r.info.run_id for r in ours] == [r.info.run_id for r in theirs]
        for a, b in zip(ours, theirs):
            assert (a.info.run_name, a.info.status, a.info.start_time, a.info.end_time) == \
                (b.info.run_name, b.info.status, b.info.start_time, b.info.end_time)
            assert a.data.tags == b.data.tags and a.data.params == b.data.params
            assert a.data.metrics.keys() == b.data.metrics.keys()
            assert all(x == y or (math.isnan(x) and math.isnan(y))
                       for x, y in zip(a.data.metrics.values(), [b.data.metrics[k] for k in a.data.metrics]))
            for key in ("train_loss", "ppl_by_length"):
                assert [(p.step, p.value) for p in fast.metric_history(a.info.run_id, key)] == \
                    [(p.step, p.value) for p in slow.metric_history(a.info.run_id, key)]


def test_reading_commands_do_not_load_mlflow_or_torch(grid):
    """plan, status and report on a SQLite store read it without MLflow or torch; validate needs torch only for
    the component contract it checks (dape_core/contract.py), never MLflow or Ray, and not even torch once the
    contract passed with this code (orchestrator/study/contract_checks.py remembers it)."""
    code = ("import sys; from orchestrator.cli import main; sys.argv = ['orchestrator', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('LOADED', sorted(m for m in ('mlflow', 'torch', 'ray', 'scipy.stats') if m in sys.modules))")
    for memory, loaded in (("off", "['torch']"), ("on", None), ("on", "[]")):  # None: either (maybe remembered)
        validate = subprocess.run([sys.executable, "-c", code, "validate", str(grid.study_file)], capture_output=True,
                                  text=True, timeout=600, env={**os.environ, "DAPE_CONTRACT_CACHE": memory})
        said = validate.stdout.splitlines()[-1] if validate.stdout else ""
        assert said.startswith("LOADED") and (loaded is None or said == f"LOADED {loaded}"), \
            (validate.stdout[-2000:], validate.stderr[-2000:])
    for command in (["status", str(grid.study_file), "--tracking-uri", grid.tracking_uri],
                    ["plan", str(grid.study_file), "--tracking-uri", grid.tracking_uri],
                    ["report", str(grid.study_file), "--tracking-uri", grid.tracking_uri, "--reports-dir",
                     str(grid.report_dir.parent.parent / "report_again")]):
        out = subprocess.run([sys.executable, "-c", code, *command], capture_output=True, text=True, timeout=600)
        assert "LOADED []" in out.stdout, (command, out.stdout[-2000:], out.stderr[-2000:])


def test_every_trial_run_has_system_metrics_under_mlflows_names(grid):
    # Sampled by the trial's process (orchestrator/execution/system_metrics.py), sent with its results through
    # Ray Tune, written by the driver: MLflow's own system-metric names, one step per sample, and the means.
    from mlflow.system_metrics.metrics.cpu_monitor import CPUMonitor

    from dape_core import metric_names as names

    monitor = CPUMonitor()
    monitor.collect_metrics()
    mlflows = {f"system/{key}" for key in monitor.metrics}  # what MLflow's own CPU monitor logs
    client, _, runs = _runs(grid)
    for run in runs:
        logged = set(run.data.metrics)
        assert mlflows <= logged and {names.PROCESS_CPU_UTILIZATION, names.PROCESS_MEMORY_MB} <= logged, logged
        samples = int(run.data.metrics[names.SYSTEM_SAMPLES])
        history = client.get_metric_history(run.info.run_id, names.PROCESS_MEMORY_MB)
        assert sorted(point.step for point in history) == list(range(samples)) and samples >= 1
        assert all(point.value > 10 for point in history)  # MB: a process with torch loaded
        assert run.data.metrics[names.MEAN_CPU_UTILIZATION] > 0
        assert names.MEAN_GPU_UTILIZATION not in logged  # no GPU here: no GPU metrics at all
        assert not any(name.startswith(names.GPU_PREFIX) for name in logged)
    # The report's trials table shows each trial's mean CPU.
    report = (grid.report_dir / "report.md").read_text()
    trials = report[report.index("## Trials\n"):]
    header = next(line for line in trials.splitlines() if line.startswith("| variant"))
    assert "CPU %" in header and "GPU %" not in header, header

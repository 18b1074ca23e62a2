"""What each trial runs, without Ray (under Ray Tune through tune_trial.py and ray_train.py, or in-process with
--local): materialize the trial's config, run the dape_core experiment, and report progress and results through
the function it is given. It never writes to MLflow: the driver is the only writer."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Callable

# Only torch-free names at import: the driver imports this module (Ray Tune needs the function), but only the
# trial's process trains, so `execute` imports the training code (torch) when it runs.
import dape_core.metric_names as names
from dape_core import ExperimentConfig
from dape_core.data import anchored
from dape_core.train.callbacks import TrainerCallback

from ..trial.protocol import (
    CHECKPOINT_FILES_KEY,
    CHECKPOINT_SET_ASIDE_KEY,
    CODE_FILES_KEY,
    DATA_RECORD_KEY,
    ENVIRONMENT_KEY,
    EVAL_PROTOCOL_TAG,
    FINAL_FLAG,
    LATER_EVALUATION_KEY,
    LOG_KEY,
    WEIGHTS_FOLDER,
    WEIGHTS_KEY,
)
from ..trial.trials import materialize
from .system_metrics import SystemSampler
from .trial_log import TrialLog

Report = Callable[[dict], None]


class ReportingSink(TrainerCallback):
    """dape_core's trainer callback, forwarding training progress to a report function and to the trial's log.
    With `all_ranks` (a multi-worker trial, whose report is collective) every rank calls it, with the same
    values."""

    def __init__(self, report: Report, total_steps: int, log: TrialLog | None = None, all_ranks: bool = False,
                 code: "CodeGuard | None" = None):
        self.report, self.total_steps, self.all_ranks = report, total_steps, all_ranks
        self.log = log or TrialLog()
        self.code = code
        self.last_val_loss: float | None = None
        self.last_step = 0

    def on_step(self, step: int, loss: float, lr: float) -> None:
        if self.code is not None and not self.last_step:  # the first step: the model is built, its modules loaded
            self.code.check("at the trial's first step")
        self.last_step = step
        self.log.write(f"step {step}/{self.total_steps}  {names.TRAIN_LOSS} {loss:.4f}  {names.LR} {lr:.3g}")
        self.report({"step": step, "total_steps": self.total_steps, names.TRAIN_LOSS: loss, names.LR: lr})

    def on_checkpoint_set_aside(self, note: str) -> None:
        # Becomes a tag of the trial's run and a console line (the driver's recorder and progress).
        self.log.write(f"checkpoint set aside: {note}")
        self.report({"step": 0, "total_steps": self.total_steps, CHECKPOINT_SET_ASIDE_KEY: note})

    def on_validation(self, step: int, val_loss: float) -> None:
        # ASHA and Optuna's pruning read this periodic validation loss.
        self.last_val_loss = val_loss
        self.log.write(f"step {step}/{self.total_steps}  {names.VAL_LOSS} {val_loss:.4f}")
        self.report({"step": step, "total_steps": self.total_steps, names.VAL_LOSS: val_loss})

    def on_checkpoint(self, step: int, path: Path) -> None:
        self.log.write(f"checkpoint at step {step}: {path}")


class CodeChangedError(RuntimeError):
    """The trial's files changed on disk while it ran: it may have run code other than the fingerprint its run
    is tagged with (issue 56)."""


class CodeGuard:
    """The trial's code checked where it runs (study/code_identity.py `changed_while_running`): its files on
    disk against the driver's fingerprint (`tune_config[CODE_FILES_KEY]`). Python imports the library lazily, so
    the files the trial loaded are those on disk when it built its model (checked at its first step) and later
    (checked again before its result is reported): an edit in between fails the trial (CodeChangedError)."""

    def __init__(self, expected: dict[str, str], config: dict):
        self.expected, self.config = expected, config

    def check(self, when: str) -> None:
        from ..study.code_identity import changed_while_running

        changed = changed_while_running(self.expected, self.config)
        if changed:
            raise CodeChangedError(
                f"{', '.join(changed)} changed on disk while the study ran (seen {when}): the trial ran code other "
                "than its recorded fingerprint's, so it is not recorded as finished; run the study again to train "
                "it with the code as it is now")


def checkpoint_every(steps: int) -> int:
    """Ten checkpoints per trial: a crashed or interrupted trial loses at most a tenth of its training."""
    return max(1, steps // 10)


def execute(tune_config: dict, report: Report, threads: int, all_ranks: bool = False) -> None:
    """Run one trial (`run_trial`) while this process samples what the hardware does (system_metrics.py): the
    samples travel with its results, the final one with their means."""
    sampler = SystemSampler().start()
    try:
        run_trial(tune_config, sampler.attach(report), threads, all_ranks)
    finally:
        sampler.stop()


def run_trial(tune_config: dict, report: Report, threads: int, all_ranks: bool = False) -> None:
    """Run one trial and report its final result (or the reason it could not finish) through `report`.

    A trial with a checkpoint folder (`tune_config["checkpoint_root"]`, one sub-folder per trial identity)
    resumes from its last checkpoint: after a crash retried by Ray Tune, or after the whole orchestrator
    was killed and run again. Its log (trial_log.py) travels with the final result, or with a last progress
    result before an error is raised.

    all_ranks: this is one worker of a multi-worker trial (`ray_train.py`), and `report` must be called the
    same number of times on every rank: progress is reported by every rank, and the final result too (an
    empty one where the rank is not 0, since rank 0 alone evaluates). A failing worker does not report its
    log (the others could not match the call); Ray Train's error names the failure.
    """
    from dape_core import NonFiniteLossError, run_experiment
    from dape_core.train import CheckpointStore

    trial = materialize(tune_config)
    experiment = ExperimentConfig(**trial.config)
    if tune_config.get("launch_dir") and experiment.che is None:
        # Relative data paths name files under the folder the study was launched from, not the trial's own.
        experiment = dataclasses.replace(experiment, data=anchored(experiment.data, tune_config["launch_dir"]))
    steps = experiment.train.steps
    root = tune_config.get("checkpoint_root")
    folder = _checkpoint_folder(Path(root), trial) if root else None
    log = TrialLog()
    expected = json.loads(tune_config.get(CODE_FILES_KEY) or "{}")  # the driver's fingerprint (none: not checked)
    code = CodeGuard(expected, trial.config) if expected else None
    sink = ReportingSink(report, steps, log, all_ranks, code)
    later = later_lengths(tune_config, trial)
    log.write(f'trial "{trial.run_name}" (id {trial.trial_id}): {_summary(experiment)}; {threads} thread(s)'
              + (f"; then the study's report.lengths {later}" if later else ""))
    # The final model, kept as an artifact of the trial's run (the driver logs the folder), CHE models too.
    keep = tune_config.get("keep_weights", "final") == "final" and folder is not None
    with log.capturing():
        try:
            result = run_experiment(experiment, sink, threads=threads, checkpoint_dir=folder,
                                    checkpoint_every=checkpoint_every(steps) if folder else None,
                                    artifacts_dir=folder / "artifacts" if folder else None,
                                    weights_dir=folder / WEIGHTS_FOLDER if keep and folder else None,
                                    later_lengths=later)
        except NonFiniteLossError as error:
            # Deterministic: retrying would diverge again. End the trial with its reason instead.
            log.write(f"FAILED: NonFiniteLossError: {error}")
            report({FINAL_FLAG: 1, "step": steps, "total_steps": steps, "error": f"NonFiniteLossError: {error}",
                    LOG_KEY: log.text()})
            return
        except CodeChangedError as error:
            _code_changed(error, report, steps, log, experiment, folder)
            return
        except Exception as error:
            log.failure(error)
            if not all_ranks:
                report({"step": sink.last_step, "total_steps": steps, LOG_KEY: log.text()})
            raise
    if code is not None:  # what the trial imported after its first step (its evaluation's modules) too
        try:
            code.check("before its result was reported")
        except CodeChangedError as error:
            _code_changed(error, report, steps, log, experiment, folder)
            return
    if result is None:  # a rank other than 0 of a multi-worker trial: rank 0 reports the result
        report({})
        return
    final = _final_result(result, sink, steps, log)
    if result.later is not None:
        _later(final, result.later, result, experiment, log, threads)
    if folder is not None:  # kept until the driver has recorded the result (execution/checkpoints.py)
        store = CheckpointStore(folder, experiment.fingerprint())
        final[CHECKPOINT_FILES_KEY] = [str(store.path), str(store.sharded.directory)]
        log.write(f"finished: the resume checkpoints in {folder} are removed once the result is recorded"
                  + ("; the final model is kept (above)" if result.weights else ""))
        final[LOG_KEY] = log.text()
    report(final)


def _code_changed(error: CodeChangedError, report: Report, steps: int, log: TrialLog, experiment: ExperimentConfig,
                  folder: Path | None) -> None:
    """End the trial with its reason (a retry would find the same files: not one), its resume checkpoints and
    kept model removed: they may hold what the other code computed, and a rerun must not resume from them."""
    from dape_core.train import CheckpointStore

    from .checkpoints import remove_checkpoints

    if folder is not None:
        store = CheckpointStore(folder, experiment.fingerprint())
        remove_checkpoints([store.path, store.sharded.directory, folder / WEIGHTS_FOLDER])
    log.write(f"FAILED: CodeChangedError: {error}")
    report({FINAL_FLAG: 1, "step": steps, "total_steps": steps, "error": f"CodeChangedError: {error}",
            LOG_KEY: log.text()})


def later_lengths(tune_config: dict, trial) -> list[int]:
    """The lengths of the study's `report.lengths` this trial scores itself after its own evaluation: the driver's
    `later_lengths` by trial identity (orchestrator/run.py: what `evaluate_later` would otherwise score from the
    kept model once every trial has finished). Not part of the trial's config, nor of its identity."""
    by_trial = tune_config.get("later_lengths") or {}
    return sorted(by_trial.get(trial.trial_id) or [])


def _checkpoint_folder(root: Path, trial) -> Path:
    """The trial's checkpoint folder: named by its identity, or by its legacy identity where a trial
    interrupted before the identity left the unused settings out has its checkpoints there."""
    legacy = root / trial.legacy_id
    return legacy if legacy.is_dir() and not (root / trial.trial_id).is_dir() else root / trial.trial_id


def _summary(cfg: ExperimentConfig) -> str:
    model, train = cfg.model, cfg.train
    kernel = model.kernel_shape  # a convolutional processor's (its record's)
    processor = model.processor if kernel is None else f"{model.processor} {'x'.join(map(str, kernel))}"
    workers = cfg.distributed.workers
    size = f"; {workers} workers ({cfg.distributed.parallelism})" if workers > 1 else ""
    return (f"{model.preset} {model.pos_encoding} processor {processor}; {train.steps} steps of {train.batch_size} x "
            f"{train.seq_len} tokens, lr {train.lr:g}, seed {train.seed}; requested device {train.device}, "
            f"precision {train.precision}{size}")


def _final_result(result, sink: ReportingSink, steps: int, log: TrialLog) -> dict:
    """The final result: metrics, provenance (data, device, precision, this process's environment), the heat
    maps' paths and the log."""
    from dape_core.environment import describe_environment

    environment = describe_environment(result.device)  # here, in the trial's process: what it trained with
    final = {FINAL_FLAG: 1, "step": steps, "total_steps": steps, "data_hash": result.data_hash,
             "device": result.device, "precision": result.precision,
             "artifacts": [str(path) for path in result.artifacts],
             DATA_RECORD_KEY: json.dumps({**result.data_record, "content_hash": result.data_hash}, default=str),
             ENVIRONMENT_KEY: json.dumps(environment)}
    log.write("environment: " + ", ".join(f"{key} {value}" for key, value in environment.items()))
    if result.weights:
        final[WEIGHTS_KEY] = result.weights
        log.write(f"model kept: {', '.join(Path(path).name for path in result.weights)} "
                  f"({result.weights_seconds:.2f}s), logged to the run's artifacts {WEIGHTS_FOLDER}/")
    if result.eval_protocol is not None:
        final[EVAL_PROTOCOL_TAG] = str(result.eval_protocol)
    if result.attention_kernels:
        final["attention_kernels"] = result.attention_kernels
        log.write(f"fused attention kernels: {result.attention_kernels}")
    if result.resumed_from is not None:
        final[names.RESUMED_FROM_STEP] = result.resumed_from
        log.write(f"resumed from step {result.resumed_from} (its last checkpoint)")
    if sink.last_val_loss is not None:
        final[names.VAL_LOSS] = sink.last_val_loss  # searchers read the metric from the final result
    # train_loss, ppl_<L>, delta_p_<L> (the report.lengths too), ms_per_step, ms_forward_<L>, flops_per_token, ...
    metrics = result.metrics()
    final.update(metrics)
    log.write(f"finished on {result.device} ({result.precision}): train {result.train_seconds:.1f}s, "
              f"evaluation {result.eval_seconds:.1f}s; data {result.data_hash}")
    log.write("metrics: " + ", ".join(f"{key} {value:.4g}" for key, value in sorted(metrics.items())))
    final[LOG_KEY] = log.text()
    return final


def _later(final: dict, later, result, experiment: ExperimentConfig, log: TrialLog, threads: int) -> None:
    """The report.lengths the trial scored (dape_core's LaterScores; their values are among the metrics), or why
    not: `evaluate_later` then scores them from the kept model and reports its own error. The driver logs them
    with the evaluation tag `orchestrator evaluate` would have logged (tracking/recorder.py)."""
    if later.error:
        log.write(f"report.lengths {later.lengths} not scored here ({later.error}): left to the evaluation after "
                  "training")
    else:
        final[LATER_EVALUATION_KEY] = json.dumps({
            "lengths": later.lengths, "eval_section": dataclasses.asdict(experiment.eval),
            "eval_protocol": later.eval_protocol, "device": result.device, "precision": result.precision,
            "threads": threads, "seconds": later.seconds})
        log.write(f"report.lengths {later.lengths} scored after the trial's own lengths, in {later.seconds:.1f}s")
    final[LOG_KEY] = log.text()

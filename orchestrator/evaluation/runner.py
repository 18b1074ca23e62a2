"""`orchestrator evaluate`: score a study's finished trials again from their kept models, without training, and
write the new metrics to the same runs; or (`--time`) time every stored model alone.

The driver (this module) is the only MLflow writer, as in `orchestrator run`: the evaluations run on Ray tasks
(one per trial, each reserving the study's `resources.cpus`/`gpus`, so several at once where they fit) or in
this process with `local`; each result is logged as soon as it arrives, so Ctrl-C loses only the trials
being evaluated, and the same command resumes with what is missing. `--time` runs one trial at a time, in
this process (`local`) or as one Ray task reserving a whole node's CPUs (and the GPU a trial uses), so that
nothing else runs on the device while it is timed.

Only FINISHED runs are evaluated: a trial another orchestrator is running (it holds its lease until its run
is FINISHED) is left alone, and so is a run stopped early by a scheduler.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import dape_core.metric_names as names
from dape_core.evaluate.config import PROTOCOL_VERSION

from ..errors import StudyInterrupted, StudyTerminated, UserInputError
from ..run_context import RunContext
from ..study import Study
from ..tracking.checksums import UNCHECKED, recorded_checksums
from ..tracking.leases import LeaseBook
from ..tracking.relocation import require_artifacts_here
from ..tracking.store import STOPPED_EARLY_TAG, TRIAL_ID_TAG, StudyStore
from ..trial.protocol import EVAL_PROTOCOL_TAG, SERIES, evaluation_tag, measured_under
from .leasing import lease_tasks, release_task
from .request import EvalRequest, TrialTask, missing_lengths, timed, weights_path


class EvaluationRefused(UserInputError):
    title = "Cannot evaluate:"


@dataclass
class EvaluationOutcome:
    evaluated: list[str] = field(default_factory=list)  # run names
    skipped: list[str] = field(default_factory=list)  # already evaluated with this protocol
    without_weights: list[str] = field(default_factory=list)  # notes naming them and how to get weights
    unchecked: list[str] = field(default_factory=list)  # run names whose runs recorded no checksum (older records)
    failed: dict[str, str] = field(default_factory=dict)  # run name -> reason
    not_finished: int = 0
    wall_seconds: float = 0.0
    task_seconds: float = 0.0
    report_dir: Path | None = None
    report_summary: str = ""
    claims: list = field(default_factory=list)  # the rebuilt report's judging.claims.ClaimResult, one per claim

    @property
    def ok(self) -> bool:
        return not self.failed


def stored_trials(context: RunContext) -> tuple[list, int]:
    """(the latest FINISHED, not stopped-early run of each of the study's trials (the context's rows), how many
    trials are not finished). A sampling search: every finished sample of the study."""
    study, store, trials = context.study, context.store, context.rows
    finished = [run for run in store.trial_runs()
                if run.info.status == "FINISHED" and run.data.tags.get(STOPPED_EARLY_TAG) != "true"]
    if study.search.algorithm != "grid":
        return sorted(finished, key=lambda run: run.info.start_time or 0), 0
    ids = [trial.trial_id for trial in trials]
    latest: dict = {}
    for run in sorted(finished, key=lambda run: run.info.start_time or 0):
        latest[run.data.tags.get(TRIAL_ID_TAG)] = run
    runs = [latest[trial_id] for trial_id in dict.fromkeys(ids) if trial_id in latest]
    return runs, len(set(ids)) - len(runs)


def plan_tasks(context: RunContext, request: EvalRequest, outcome: EvaluationOutcome) -> list[TrialTask]:
    """What each finished trial still needs; notes trials without weights and those already done."""
    study, store = context.study, context.store
    runs, outcome.not_finished = stored_trials(context)
    by_id = {run.info.run_id: run for run in runs}
    tasks = []
    for run in runs:
        tags, metrics, name = run.data.tags, run.data.metrics, run.info.run_name
        if not weights_path(tags):
            outcome.without_weights.append(
                f"{name} (run {run.info.run_id}) has no kept model: it was trained with keep_weights: none or before "
                "trials kept their weights. To get them, delete that run "
                "(mlflow runs delete --run-id "
                f"{run.info.run_id}) and run the study again with keep_weights: final: only that trial is retrained")
            continue
        try:
            config = stored_config(run.info.artifact_uri or "", store.tracking_uri)
        except Exception as error:  # damaged or missing config.json: this trial cannot be evaluated
            outcome.failed[name] = f"run {run.info.run_id}: {error}"
            continue
        if config.get("che"):
            task = che_task(study, run, config, request, outcome)
            if task is not None:
                tasks.append(task)
            continue
        own, seq_len = config["eval"], config["train"]["seq_len"]
        suffix = request.suffix(own, seq_len)
        later = study.report.later_lengths(seq_len, own["lengths"])  # report.lengths: evaluated after training
        wanted = sorted(set(request.lengths) or set(own["lengths"]) | set(later))
        shorter = [length for length in wanted if length < seq_len]
        lengths = missing_lengths([length for length in wanted if length >= seq_len], {} if request.again and
                                  request.lengths else metrics, suffix)
        stale = not suffix and measured_under(tags) != PROTOCOL_VERSION and bool(names.by_length(metrics, names.PPL))
        if stale:  # a row never mixes protocols: every length it has, scored again with those asked for
            lengths = sorted(set(lengths) | set(names.by_length(metrics, names.PPL)) | set(own["lengths"]))
        time_it = request.time and (request.again or not timed(metrics))
        if not lengths and not request.visualise and not time_it:
            outcome.skipped.append(name)
            continue
        task = TrialTask(run_id=run.info.run_id, run_name=name, trial_id=tags.get(TRIAL_ID_TAG, ""),
                         artifact_uri=run.info.artifact_uri or "", config=config, lengths=lengths, suffix=suffix,
                         eval_section=request.eval_section(own, later), threads=max(1, int(study.resources.cpus)),
                         precision=tags.get("precision"), device=tags.get("device"), visualise=request.visualise,
                         time=time_it, warmup=request.time_warmup, repeats=request.time_repeats,
                         timed_lengths=sorted(set(own["lengths"]) | set(lengths)
                                              | set(names.by_length(metrics, names.PPL))))
        if shorter:
            task.notes.append(f"lengths {shorter} are below its training length {seq_len}: not evaluated")
        if stale:
            task.rescored = True
            task.notes.append(f"measured under evaluation protocol {measured_under(tags)}: every length it has is "
                              f"scored again under protocol {PROTOCOL_VERSION} (docs/protocol.md)")
        tasks.append(task)
    for task in tasks:  # the files are checked against these where they are loaded (worker.py)
        task.checksums = recorded_checksums(by_id[task.run_id].data.tags)
        if not task.checksums:
            outcome.unchecked.append(task.run_name)
    return tasks


def estimated_cost(task: TrialTask) -> float:
    """A task's forward FLOPs per window summed over its lengths (planning/estimate.py's count): what orders
    the tasks, not a duration. 0 where the config does not give one (then the task keeps its place)."""
    from dape_core import ExperimentConfig

    from ..planning.estimate import count_parameters, forward_flops_per_sequence

    try:
        model = ExperimentConfig(**task.config).model
        parameters = count_parameters(model)
        return sum(forward_flops_per_sequence(model, length, parameters) for length in task.lengths)
    except Exception:  # an estimate only: a config this code cannot price is evaluated all the same
        return 0.0


def longest_first(tasks: list[TrialTask]) -> list[TrialTask]:
    """The tasks by estimated cost, longest first (ties in the stored order): on Ray they start in this order as
    slots free up, so the longest evaluation does not end the phase alone (kernel_size's 1x7 at 1024, the
    costliest, came last in study order). The order changes no result: each task is a pure function of its
    trial's kept model."""
    cost = {id(task): estimated_cost(task) for task in tasks}
    return sorted(tasks, key=lambda task: -cost[id(task)])


def che_task(study: Study, run, config: dict, request: EvalRequest, outcome: EvaluationOutcome) -> TrialTask | None:
    """A CHE trial's task: its accuracy at the test lengths asked for (`--lengths`, else the study's
    report.lengths) that its run lacks (`acc_<L>`); the other options do not apply to CHE models."""
    che, name = config["che"], run.info.run_name
    own = list(che["test_lengths"])
    later = study.report.later_lengths(che["train_max_length"], own)
    wanted = sorted(set(request.lengths) or set(later))
    lengths = [length for length in wanted if (request.again and request.lengths)
               or names.per_length(names.ACC, length) not in run.data.metrics]
    if not lengths:
        outcome.skipped.append(name)
        return None
    task = TrialTask(run_id=run.info.run_id, run_name=name, trial_id=run.data.tags.get(TRIAL_ID_TAG, ""),
                     artifact_uri=run.info.artifact_uri or "", config=config, lengths=lengths, suffix="",
                     eval_section={"batch_size": che["eval_batch_size"], "eval_batches": che["eval_batches"],
                                   "test_lengths": sorted(set(own) | set(lengths))},
                     threads=max(1, int(study.resources.cpus)), precision=run.data.tags.get("precision"),
                     device=run.data.tags.get("device"), che=True)
    ignored = [flag for flag, given in (("--tail-tokens", request.tail_tokens is not None), ("--windows",
               request.n_windows is not None), ("--visualise", request.visualise), ("--time", request.time)) if given]
    if ignored:
        task.notes.append(f"{', '.join(ignored)} do not apply to a CHE model: only its test lengths are evaluated")
    return task


def stored_config(artifact_uri: str, tracking_uri: str) -> dict:
    """The effective config a run's kept model was trained with (its `model/config.json`). Raises an error
    naming the file where it is missing or damaged."""
    from dape_core.stored import CONFIG_FILE, read_config

    from ..trial.protocol import WEIGHTS_FOLDER
    from .worker import weights_folder

    if artifact_uri.startswith(("file:", "/")) or "://" not in artifact_uri:
        folder, _ = weights_folder(artifact_uri)
        return read_config(folder).to_dict()

    import mlflow.artifacts

    with tempfile.TemporaryDirectory(prefix="orchestrator_config_") as temporary:
        uri = f"{artifact_uri.rstrip('/')}/{WEIGHTS_FOLDER}/{CONFIG_FILE}"
        path = mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=temporary, tracking_uri=tracking_uri)
        return read_config(Path(path).parent).to_dict()


def check_memory(study: Study, tasks: list[TrialTask]) -> None:
    """Refuse, before anything runs, lengths whose evaluation would not fit the device's memory (the plan's
    memory model: planning/estimate.py `evaluation_memory_bytes`)."""
    from dape_core import ModelConfig

    from ..planning.estimate import evaluation_memory_bytes

    budget, where = memory_budget(study)
    too_big = []
    for task in tasks:
        model = ModelConfig(**task.config["model"])
        for length in task.lengths:
            need = evaluation_memory_bytes(model, task.eval_section.get("batch_size", 8), length)
            if need > budget:
                too_big.append(f"{task.run_name} at L={length}: about {need / 2**30:.1f} GiB")
    if too_big:
        raise EvaluationRefused(
            f"evaluating {'; '.join(too_big[:6])}{' ...' if len(too_big) > 6 else ''} would not fit {where} "
            f"({budget / 2**30:.1f} GiB; estimate: the model's float32 weights, one layer's activations and its "
            "score maps of one evaluation batch, with the block path's rows beyond eval_block_size). Give shorter "
            "--lengths, or a smaller eval batch in the study (eval.batch_size). Nothing was evaluated.")


def _require_writable(tracking_uri: str) -> None:
    """StoreUnusable (exit 2, `run`'s words) where the SQLite store's folder or file cannot be written: MLflow
    would otherwise fail at the first write, after its retries, with a screen of SQLAlchemy's traceback."""
    from ..tracking.sqlite_file import check_store_writable
    from ..tracking.uri import sqlite_path

    path = sqlite_path(tracking_uri)
    if path is not None:
        check_store_writable(path, "Nothing was evaluated (`orchestrator report` reads a read-only store).")


def memory_budget(study: Study) -> tuple[float, str]:
    if study.resources.gpus:
        if study.resources.gpu_memory_gb:
            return study.resources.gpu_memory_gb * 2**30 * min(1.0, study.resources.gpus), "resources.gpu_memory_gb"
        return float("inf"), "the GPU"
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return float(total), "this machine's memory"


def record(store: StudyStore, task: TrialTask, result: dict, request: EvalRequest, version: str) -> None:
    """Log one evaluation to the trial's run: its metrics (at the trial's last step, where its own final
    metrics are), the by-length series points of its own protocol, heat maps, and a tag saying what was
    evaluated, how and when."""
    metrics = result["metrics"]
    now = int(time.time() * 1000)
    step = int(task.config.get("train", {}).get("steps", 0))
    for path in result.get("artifacts") or []:  # first: the one batch below is what marks the evaluation done
        if Path(path).is_file():
            store.log_artifact(task.run_id, Path(path), "attention")
    entries = [(name, value, step) for name, value in metrics.items()]
    if not task.suffix:
        for name, prefix in SERIES.items():
            entries += [(name, value, length) for length, value in names.by_length(metrics, prefix).items()]
    more = {}
    if task.time:  # when it ran (epoch seconds): the timings of one study never overlap
        more["timing"] = {"warmup": task.warmup, "repeats": task.repeats, "alone": True,
                          "began": round(result.get("began", 0.0), 3), "ended": round(result.get("ended", 0.0), 3)}
    # One transaction: a process killed while recording leaves every value of this evaluation or none of them.
    tags = evaluation_tag(task.lengths, task.eval_section, version=version, eval_protocol=result.get("eval_protocol"),
                          device=result.get("device"), precision=result.get("precision"),
                          threads=result.get("threads"), seconds=result.get("seconds", 0.0), suffix=task.suffix,
                          visualise=task.visualise, time_it=task.time, **more)
    if not task.suffix and result.get("eval_protocol") is not None and task.lengths:  # all the row's lengths if stale
        tags[EVAL_PROTOCOL_TAG] = str(result["eval_protocol"])
    store.log_batch(task.run_id, entries, tags, now)
    if not task.suffix:
        store.log_length_table(task.run_id)  # the run's table by length, with the lengths just added


def evaluate_study(context: RunContext, request: EvalRequest, *, reports_dir: Path = Path("reports"),
                   say: Callable[[str], None] = print, report: bool = True) -> EvaluationOutcome:
    """Evaluate what the study's finished trials lack (see the module's docstring), then build the report
    (rebuilt where something was evaluated), whose claims the outcome carries. The context: the command's
    study, its rows (the stored runs are matched against these, and the report reads them), its store (opened
    once by the command: `orchestrator evaluate` opens it, `orchestrator run` evaluates in the store it created),
    and where the evaluations run (`local`, `address`). `report`: False where the caller builds it
    (`orchestrator run`, after evaluating its report.lengths)."""
    from ..reporting import build_report, render_md
    from ..tracking.source import code_source

    started = time.monotonic()
    study, store = context.study, context.store
    require_artifacts_here(store.tracking_uri)  # a copied store is evaluated in its own place, never the original's
    _require_writable(store.tracking_uri)  # metrics, leases and the report go into it: refused first, as `run` does
    outcome = EvaluationOutcome()
    tasks = longest_first(plan_tasks(context, request, outcome))
    for note in outcome.without_weights:
        say(f"note: {note}")
    if outcome.unchecked:
        say(f"note: {', '.join(outcome.unchecked)}: {UNCHECKED}")
    check_memory(study, tasks)
    version = code_source().version  # the code that evaluates, which may be newer than the one that trained
    for task in tasks:
        task_notes = "; ".join(task.notes)
        if task_notes:
            say(f"note: {task.run_name}: {task_notes}")
    if (tasks or report) and outcome.skipped:  # `orchestrator run` says nothing where its report.lengths are all there
        say(f"{len(outcome.skipped)} trial(s) already evaluated with this protocol: skipped")
    with LeaseBook(store) as leases:  # each (run, length) scored by one command (leasing.py)
        tasks = lease_tasks(tasks, leases, store, request, say)
        if tasks or report:
            say(f"Evaluating {len(tasks)} stored trial(s){' one at a time (timing)' if request.time else ''}"
                f"{' in this process' if context.local else ' on Ray'}")
        _evaluate_leased(context, tasks, request, outcome, version, leases, say)
    if report:  # every time, so that the command ends with the claims' verdicts (unchanged inputs: the same files)
        built = build_report(context, reports_dir, rebuild=bool(outcome.evaluated))
        outcome.report_dir, outcome.report_summary = built.folder, render_md.summary(built.document)
        outcome.claims = built.claims
    outcome.wall_seconds = time.monotonic() - started
    return outcome


def _evaluate_leased(context: RunContext, tasks: list[TrialTask], request: EvalRequest, outcome: EvaluationOutcome,
                     version: str, leases, say: Callable[[str], None]) -> None:
    """Evaluate the leased tasks, each recorded as soon as it arrives and its lease given back."""
    study, store, tracking_uri = context.study, context.store, context.tracking_uri
    payloads = [{**task.payload(), "tracking_uri": tracking_uri, "launch_dir": str(Path.cwd()),
                 "plugins": list(study.plugin_payloads())} for task in tasks]  # loaded where a task runs

    def done(task: TrialTask, result: dict | None, error: str | None) -> None:
        try:
            _done(task, result, error)
        finally:
            release_task(leases, task)

    def _done(task: TrialTask, result: dict | None, error: str | None) -> None:
        if error is not None:
            outcome.failed[task.run_name] = error
            say(f"  {task.run_name}: FAILED: {error}")
            return
        assert result is not None, "a task that did not fail has its result (_run_here, _run_on_ray)"
        record(store, task, result, request, version)
        outcome.evaluated.append(task.run_name)
        outcome.task_seconds += result.get("seconds", 0.0)
        shown = ", ".join(f"{k} {v:.4g}" for k, v in sorted(result["metrics"].items())
                          if not k.endswith(names.QUARTILE_SUFFIXES))
        say(f"  {task.run_name}: {shown or 'heat maps'} ({result.get('seconds', 0):.1f}s on {result.get('device')})")

    try:
        if context.local or not tasks:
            _run_here(tasks, payloads, done)
        else:
            _run_on_ray(study, tasks, payloads, done, context.address, one_at_a_time=request.time)
    except KeyboardInterrupt:
        from ..execution import interrupt

        stopped_by = StudyTerminated if interrupt.exit_code() == StudyTerminated.exit_code else StudyInterrupted
        raise stopped_by(
            f"by {interrupt.cause()}. {len(outcome.evaluated)} trial(s) were evaluated and their metrics are in "
            f"{tracking_uri}; run the same command to evaluate what is missing.") from None


def _run_here(tasks: list[TrialTask], payloads: list[dict], done) -> None:
    from .worker import evaluate_task

    for task, payload in zip(tasks, payloads):
        try:
            result = evaluate_task(payload)
        except Exception as error:  # this trial's problem (damaged weights, changed data): the others go on
            done(task, None, f"{type(error).__name__}: {error}")
            continue
        done(task, result, None)


def _run_on_ray(study: Study, tasks: list[TrialTask], payloads: list[dict], done, address: str | None,
                one_at_a_time: bool) -> None:
    import ray

    from ..errors import last_error_line
    from ..execution.ray_tune import start_ray
    from .worker import evaluate_task

    start_ray(address)
    cpus, gpus = study.resources.cpus, study.resources.gpus
    if one_at_a_time:  # nothing else on the device: a whole node's CPUs, and a whole GPU where trials use one
        cpus = max(cpus, max(node["Resources"].get("CPU", 1) for node in ray.nodes() if node["Alive"]))
        gpus = 1 if gpus else 0
    remote = ray.remote(num_cpus=cpus, num_gpus=gpus, max_retries=0)(evaluate_task)
    pending: dict = {}
    queue = list(zip(tasks, payloads))
    try:
        while queue or pending:
            while queue and (not one_at_a_time or not pending):
                task, payload = queue.pop(0)
                pending[remote.remote(payload)] = task
            ready, _ = ray.wait(list(pending), num_returns=1)
            task = pending.pop(ready[0])
            try:
                result = ray.get(ready[0])
            except Exception as error:  # the task's own error, as one line
                done(task, None, last_error_line(str(error)) or type(error).__name__)
                continue
            done(task, result, None)
    except KeyboardInterrupt:
        for reference in pending:
            ray.cancel(reference, force=True)
        raise

"""Ray Tune execution of a study's trials: Ray start-up, search algorithm, scheduler, Tuner."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

import ray
from ray import tune

from ..errors import exception_chain
from ..study import Distribution, Study
from ..tracking.console import ConsoleProgress
from ..tracking.events import TrialEvents
from ..trial.protocol import CODE_FILES_KEY
from ..trial.trials import Trial, materialize
from . import interrupt
from .cluster import DEFAULT_CONNECT_TIMEOUT_S, connect
from .ray_train import tune_trial_bundles
from .tune_callback import TuneEventsCallback
from .tune_trial import run_trial


def start_ray(address: str | None, timeout: float = DEFAULT_CONNECT_TIMEOUT_S) -> None:
    """A private local Ray, or the cluster at `address` (bounded by `timeout`: see cluster.py)."""
    connect(address, timeout, _ray_unreachable_message)


def _ray_unreachable_message(address: str, error: Exception) -> str:
    # Ray's own errors are screens of traceback. A token mismatch is the usual case on a real cluster: Ray
    # enables token authentication by default, and an explicit address never turns it on in the driver.
    text = "\n".join(str(cause) for cause in exception_chain(error))
    if re.search(r"InvalidAuthToken|authentication token|AuthenticationError", text, re.IGNORECASE):
        return (f"The Ray cluster at {address} did not accept this driver's authentication. Give the driver the "
                "cluster's setting: RAY_AUTH_MODE=token and the cluster's token in RAY_AUTH_TOKEN (or in a file "
                f"named by RAY_AUTH_TOKEN_PATH); here RAY_AUTH_MODE is {os.environ.get('RAY_AUTH_MODE', 'unset')}. "
                "No trial was run.")
    return (f"Cannot connect to the Ray cluster at {address}. Check the address (HOST:PORT of the head's GCS, "
            "ray://HOST:10001 for Ray Client, or auto on a cluster node) and that the head is up. No trial was run.")


class InterruptStopper(tune.Stopper):
    """Stops every trial once Ctrl-C or SIGTERM asked the study to stop (interrupt.py). Stateless, so that Tune can
    pickle it with its experiment state."""

    def __call__(self, trial_id, result) -> bool:
        return False

    def stop_all(self) -> bool:
        return interrupt.requested()


def to_tune_domain(dist: Distribution):
    if dist.type == "choice":
        assert dist.values is not None, "a choice has its values (Distribution's validation)"
        return tune.choice(dist.values)
    assert dist.low is not None and dist.high is not None, "a range has its bounds (Distribution's validation)"
    if dist.type == "uniform":
        return tune.uniform(dist.low, dist.high)
    if dist.type == "loguniform":
        return tune.loguniform(dist.low, dist.high)
    return tune.randint(int(dist.low), int(dist.high) + 1)  # `int` is inclusive of high in the study file


def _search_algorithm(study: Study):
    if study.search.algorithm == "optuna":
        from optuna.samplers import TPESampler
        from ray.tune.search.optuna import OptunaSearch

        class SparseMetricOptunaSearch(OptunaSearch):
            """Optuna's Tune searcher reads the metric from every result; ours arrive only with some results
            (validation every eval_every steps, perplexity at the end), so results without it are skipped.
            Several metrics (a list, with a list of modes): Optuna's multi-objective study, told each sample's
            metrics when it completes (it takes no intermediate results)."""

            def on_trial_result(self, trial_id, result):
                if isinstance(self.metric, str) and self.metric in result:
                    super().on_trial_result(trial_id, result)

        search = study.search
        # TPE is Optuna's multi-objective sampler too (MOTPE): one sampler, seeded, for one or several metrics.
        metric: str | list[str] = search.metrics if search.multi_objective else search.primary_metric
        mode: str | list[str] = search.modes if search.multi_objective else search.modes[0]
        return SparseMetricOptunaSearch(metric=metric, mode=mode, sampler=TPESampler(seed=search.seed))
    if study.search.algorithm == "random":
        from ray.tune.search import BasicVariantGenerator

        return BasicVariantGenerator(random_state=study.search.seed)
    return None


def _scheduler(study: Study, max_steps: int):
    if study.scheduler.type != "asha":
        return None
    from ray.tune.schedulers import ASHAScheduler

    # max_t one past the last step: a trial that reaches its end must finish by itself (its final result
    # carries the evaluation), not be stopped by the scheduler at its last training step.
    # ASHA is for a single-metric search (validation): its one metric and direction
    return ASHAScheduler(time_attr="step", metric=study.scheduler.metric or study.search.primary_metric,
                         mode=study.search.modes[0], max_t=max_steps + 1, grace_period=study.scheduler.grace_period,
                         reduction_factor=study.scheduler.reduction_factor)


def run_with_tune(study: Study, trials: list[Trial], events: TrialEvents, storage_dir: Path,
                  address: str | None, progress: ConsoleProgress,
                  later_lengths: dict[str, list[int]] | None = None, code_files: dict[str, str] | None = None) -> int:
    """Run the trials; returns how many could run at once (for the overhead figure). `later_lengths`: trial id ->
    the lengths it scores after its own (trainable.py `later_lengths`); `code_files`: the code fingerprint's
    files, which each trial checks on disk (trainable.py CodeGuard)."""
    start_ray(address)
    cpus = ray.cluster_resources().get("CPU", 1)
    progress.message(f"Running {progress.total} trial(s) on Ray ({cpus:.0f} CPUs)")
    # Tune's own console output would interleave with ours: the legacy reporter is silent at verbose=0.
    os.environ["RAY_AIR_NEW_OUTPUT"] = "0"
    # Step results carry the training loss only; the searched metric (e.g. ppl_512) arrives with the final
    # result, and validation metrics every eval_every steps. Tune's strict check would reject the others.
    os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"  # ours stops the trials instead (interrupt.py)
    # MLflow is the record of every result: Tune's own CSV/JSON/TensorBoard files would only copy it, and its
    # TensorBoard logger alone loads torch into this driver (seconds at every start).
    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"
    # ... so the result grid Tune builds at the end finds no result files: its warning about them is not ours.
    logging.getLogger("ray.tune.analysis.experiment_analysis").setLevel(logging.ERROR)
    sampling = study.search.sampled
    payloads = [trial.payload() for trial in trials]
    param_space: dict = {"trial": tune.grid_search(payloads) if len(payloads) > 1 or not sampling else payloads[0]}
    param_space["checkpoint_root"] = str(storage_dir.resolve() / "checkpoints")
    param_space["launch_dir"] = str(Path.cwd())  # relative data paths are relative to it, not to a trial's folder
    param_space["keep_weights"] = study.keep_weights
    param_space["later_lengths"] = later_lengths or {}  # not a search dimension: a constant of every trial
    # The same, as JSON: Tune's searchers refuse keys holding its "/" (file names). A trial checks its files with it.
    param_space[CODE_FILES_KEY] = json.dumps(code_files or {})
    # Multi-worker trials: what Ray Train reserves per worker, and where it keeps its runs' state.
    param_space["worker_resources"] = {"CPU": study.resources.cpus, "GPU": study.resources.gpus}
    param_space["train_storage"] = str(storage_dir.resolve() / "ray_train")
    if sampling:
        param_space["params"] = {key: to_tune_domain(dist) for key, dist in study.search.space.items()}
    max_steps = max(trial.config["train"]["steps"] for trial in trials)
    tuner = tune.Tuner(
        tune.with_resources(run_trial, lambda config: _trial_resources(config, study)),
        param_space=param_space,
        tune_config=tune.TuneConfig(
            num_samples=study.search.samples_per_row,
            search_alg=_search_algorithm(study),
            scheduler=_scheduler(study, max_steps),
            max_concurrent_trials=study.resources.max_concurrent,
            trial_dirname_creator=lambda t: f"trial_{t.trial_id}",
            # A finished trial's process takes the next trial of the same resources: torch, dape_core and the
            # corpus are loaded once per process rather than once per trial (seconds each, most of a CPU trial).
            # Results do not depend on it: every trial seeds and sizes its own threads (bit-identical, measured).
            reuse_actors=True,
        ),
        run_config=tune.RunConfig(
            name=study.name,
            storage_path=str(storage_dir.resolve() / "ray_results"),
            verbose=0,
            stop=InterruptStopper(),
            callbacks=[TuneEventsCallback(events)],
            failure_config=tune.FailureConfig(max_failures=study.resources.max_retries),
        ),
    )
    with interrupt.graceful_interrupt(lambda what: progress.message(
            f"{what}: stopping. The running trials are stopped and closed as KILLED; run the same command to resume "
            f"them from their checkpoints ({what} again quits at once, still closing them).")):
        tuner.fit()
    widest = max(trial.workers for trial in trials)
    slots = int(cpus // (study.resources.cpus * widest)) if study.resources.cpus else 1
    if study.resources.max_concurrent:
        slots = min(slots, study.resources.max_concurrent)
    return max(1, min(slots, len(trials) * study.search.samples_per_row))


def _trial_resources(config: dict, study: Study) -> tune.PlacementGroupFactory:
    """A one-worker trial reserves its CPUs and GPUs; a multi-worker trial only its Train driver's memory
    (Ray Train reserves the workers', see ray_train.py)."""
    workers = materialize(config).workers
    return tune.PlacementGroupFactory(tune_trial_bundles(workers, study.resources.cpus, study.resources.gpus))

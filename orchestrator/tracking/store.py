"""A study's tracking store: its MLflow experiment, its parent run, one nested child run per trial.

`StudyStore.create` is the writer's door (`orchestrator run`: creates the experiment if needed);
`StudyStore.open` the reader's (plan, status, report, ui, `load_results`): it never creates or changes
anything and says clearly when the study has no store or no experiment there. Both find the parent run once.
Only the driver process writes (trials report to Ray Tune, a Tune callback on the driver forwards to
MLflow): an embedded SQLite store then has one writer per `orchestrator run`, and two runs of one study
share its trials through leases (`leases.py`).

Before MLflow opens a store, both doors check it (`sqlite_file.py`: a damaged or empty SQLite file, a
folder that cannot be written; `client.probe_server`: a tracking server that does not answer) so that each
of these fails at once in one paragraph. The experiments this tool creates carry the tag
`orchestrator.study`; an experiment of the study's name without it belongs to someone else and is refused,
never written into. A SQLite store keeps its artifacts beside its file, and one moved or copied with them
is pointed at them where it lands (relocation.py). A SQLite store is read without MLflow (readers.py); MLflow's
client is made for writes.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

from ..errors import ForeignExperiment, StoreUnusable
from . import dashboard
from .lookup import no_experiment, require_store
from .readers import TESTED_REVISIONS, ClientReader, SQLiteReader, reader_for
from .relocation import relocate
from .sqlite_file import check_folder_writable, check_readable, check_writable, store_lock
from .uri import is_server, sqlite_path

ROLE_TAG = "orchestrator.role"
TRIAL_ID_TAG = "orchestrator.trial_id"
TEMPLATE_TAG = "orchestrator.template_id"  # a sampled trial's row before sampling (its search's template)
STUDY_TAG = "orchestrator.study"  # on runs, and on the experiments this tool created (their study's name)
PARENT_TAG = "mlflow.parentRunId"
STOPPED_EARLY_TAG = "stopped_early"  # a scheduler (ASHA) ended the trial before its last step
INTERRUPTED_TAG = "interrupted"  # Ctrl-C stopped the trial; its run is KILLED and the next run resumes it
STALE_TAG = "orchestrator.stale"  # a run left RUNNING by an orchestrator that died, closed as KILLED
WEIGHTS_TAG = "orchestrator.weights"  # the kept model's weights file among the run's artifacts (model/...)
SWEPT_TAG_PREFIX = "swept."  # swept.<dotted key> = the value a trial's row sets (variant override or axis point)
ENV_TAG_PREFIX = "env."  # env.<key> = what the trial's process ran with (dape_core/environment.py): env.torch, ...
CODE_TAG = "orchestrator.code_fingerprint"  # the code the trial executed (study/code_identity.py); absent: unknown
REUSED_FROM_PREFIX = "reused_from."  # on a study's parent run: reused_from.<trial id> = "<study> <run id>"
LIBRARY_TAG = "orchestrator.library_fingerprint"  # the whole library's fingerprint when the trial ran
CODE_FILE = "code_fingerprint.json"  # the trial run's artifact: that fingerprint's per-file hashes


class StudyStore:
    def __init__(self, tracking_uri: str, study_name: str, experiment_id: str, client=None, reader=None):
        """Use `create` or `open`. Reads go through `reader` (readers.py); MLflow's client, which every write
        uses, is made on first use, so that a read-only command on a SQLite store never imports MLflow."""
        self.tracking_uri, self.study_name, self.experiment_id = tracking_uri, study_name, experiment_id
        self._client = client
        self.reader = reader or ClientReader(self.client)
        self._parent = None  # the parent run as last read (its status and tags: `start_parent`'s `idle`)
        self.parent_kept = False  # start_parent(idle=True) left the finished parent run as it was
        self.parent_run_id: str | None = self._find_parent()

    @property
    def client(self):
        """MLflow's client (ReachabilityCheckedClient), made on first use."""
        if self._client is None:
            self._client = _client(self.tracking_uri)
        return self._client

    @classmethod
    def create(cls, tracking_uri: str, study_name: str, connect_timeout: float | None = None) -> "StudyStore":
        """The study's experiment, created if it does not exist yet (with the SQLite file's folder).
        Raises StoreUnusable (a damaged, empty or unwritable store; ForeignExperiment: the name is taken by an
        experiment this tool did not create) or TrackingServerUnreachable, before writing anything."""
        path = sqlite_path(tracking_uri)
        if path is None:
            _probe_if_server(tracking_uri, connect_timeout)
            return cls._create_experiment(tracking_uri, study_name, _client(tracking_uri))
        check_folder_writable(path)
        relocate(path)  # a store moved or copied with its artifacts folder writes there (relocation.py)
        with store_lock(path):  # one process at a time creates the tables and the experiment
            check_writable(path)
            ready = cls._existing(tracking_uri, study_name, path)
            if ready is not None:  # MLflow's client is made at the first write (a rerun with none: never)
                return ready
            store = cls._create_experiment(tracking_uri, study_name, _client(tracking_uri))
        # Reads straight from the file (readers.py: what MLflow's client returns, without its ORM: a study of
        # a thousand trials is read in a second rather than in several); writes still go through MLflow.
        store.reader = reader_for(tracking_uri, store.client)  # the client where the schema is not the tested one
        return store

    @classmethod
    def _existing(cls, tracking_uri: str, study_name: str, path: Path) -> "StudyStore | None":
        """The study's store where `create` has nothing to create or change: a SQLite file of a schema the direct
        reader is tested with (readers.py), holding the study's experiment, this tool's, with its dashboard's
        kind; None otherwise (MLflow's client then creates, migrates or tags what is missing)."""
        if not path.is_file():
            return None
        reader = SQLiteReader(path)
        if reader.revision() not in TESTED_REVISIONS:
            return None
        existing = reader.experiment(study_name)
        if existing is None or existing[1].get(dashboard.EXPERIMENT_KIND_TAG) != dashboard.TRAINING_KIND:
            return None
        _check_ownership(reader, existing[0], existing[1], tracking_uri, study_name)
        return cls(tracking_uri, study_name, existing[0], None, reader)

    @classmethod
    def _create_experiment(cls, tracking_uri: str, study_name: str, client) -> "StudyStore":
        from mlflow.exceptions import MlflowException

        existing = client.get_experiment_by_name(study_name)
        if existing is None:
            # Keep a SQLite store's artifacts beside its file rather than in the current directory.
            path = sqlite_path(tracking_uri)
            artifact_location = (path.parent / "artifacts").as_uri() if path is not None else None
            # The machine-learning kind: MLflow's UI then opens the experiment on its runs (tracking/dashboard.py).
            tags = {STUDY_TAG: study_name, dashboard.EXPERIMENT_KIND_TAG: dashboard.TRAINING_KIND}
            try:
                return cls(tracking_uri, study_name, client.create_experiment(
                    study_name, artifact_location=artifact_location, tags=tags), client)
            except MlflowException as error:  # another orchestrator on a server created it first
                existing = client.get_experiment_by_name(study_name)
                if existing is None:
                    raise error
        tags = dict(existing.tags)
        _check_ownership(ClientReader(client), existing.experiment_id, tags, tracking_uri, study_name)
        if tags.get(dashboard.EXPERIMENT_KIND_TAG) != dashboard.TRAINING_KIND:
            client.set_experiment_tag(existing.experiment_id, dashboard.EXPERIMENT_KIND_TAG, dashboard.TRAINING_KIND)
        return cls(tracking_uri, study_name, existing.experiment_id, client)

    @classmethod
    def open(cls, tracking_uri: str, study_name: str, chosen: str = "",
             connect_timeout: float | None = None) -> "StudyStore":
        """The study's experiment in an existing store; never creates or changes either. Raises StudyNotFound
        (its message says how the store was `chosen`: tracking/uri.py's StoreChoice.how), StoreUnusable or
        TrackingServerUnreachable. A SQLite store is read without MLflow (readers.py)."""
        require_store(tracking_uri, chosen)
        path = sqlite_path(tracking_uri)
        if path is None:
            _probe_if_server(tracking_uri, connect_timeout)
            client = _client(tracking_uri)
            reader: SQLiteReader | ClientReader = ClientReader(client)
            existing = reader.experiment(study_name)
        else:
            client = None
            if path.is_file():  # a moved store reads (and `evaluate` writes) the artifacts beside it
                relocate(path, require=False)
            with store_lock(path, exclusive=False):  # a store being created is read once it is whole
                check_readable(path)
                reader = reader_for(tracking_uri)  # directly, or through MLflow's client (readers.py)
                existing = reader.experiment(study_name)
        if existing is None:
            raise no_experiment(tracking_uri, study_name, chosen)
        _check_ownership(reader, existing[0], existing[1], tracking_uri, study_name)
        return cls(tracking_uri, study_name, existing[0], client, reader)

    # --- the study's parent run ---------------------------------------------------------------------------
    def _find_parent(self) -> str | None:
        runs = self.reader.runs(self.experiment_id, ROLE_TAG, "study")
        self._parent = runs[0] if runs else None
        return runs[0].info.run_id if runs else None

    def start_parent(self, tags: dict[str, str], idle: bool = False) -> str:
        """Reuse the study's parent run across invocations so that resumed trials nest under it. On a SQLite
        store, two orchestrators starting at once find or create it one after the other (one parent).
        `idle`: nothing will run (a finished study run again). A parent run that is FINISHED and already has
        these tags is then left as it is (`parent_kept`): nothing is written, neither here nor by
        `end_parent("FINISHED")` nor by `set_tags` of values it has, so that such a rerun never loads MLflow."""
        path = sqlite_path(self.tracking_uri)
        with store_lock(path) if path is not None else nullcontext():
            self.parent_run_id = self._find_parent()
            self.parent_kept = idle and self._parent_has("FINISHED", tags)
            if self.parent_kept:
                assert self.parent_run_id is not None, "a parent run was found (_parent_has)"
                return self.parent_run_id
            return self._start_parent(tags)

    def _parent_has(self, status: str, tags: dict[str, str]) -> bool:
        """The parent run, as read, has this status and these tags (as MLflow stores them: strings)."""
        parent = self._parent
        return parent is not None and parent.info.status == status and \
            all(parent.data.tags.get(key) == str(value) for key, value in tags.items())

    def _start_parent(self, tags: dict[str, str]) -> str:
        if self.parent_run_id:
            self.client.update_run(self.parent_run_id, status="RUNNING")
        else:
            run = self.client.create_run(self.experiment_id, run_name=self.study_name,
                                         tags={ROLE_TAG: "study", STUDY_TAG: self.study_name})
            self.parent_run_id = run.info.run_id
        for key, value in tags.items():
            self.client.set_tag(self.parent_run_id, key, value)
        return self.parent_run_id

    def end_parent(self, status: str = "FINISHED") -> None:
        if self.parent_kept and status == "FINISHED":
            return  # nothing ran: the parent run is FINISHED already (start_parent's `idle`)
        self.parent_kept = False
        if self.parent_run_id:
            self.client.set_terminated(self.parent_run_id, status=status)

    def refresh_dashboard(self) -> None:
        """(Re)write the experiment tags of the study's MLflow dashboard from the trials' metrics: the
        machine-learning kind and the saved view that `orchestrator ui` opens (tracking/dashboard.py)."""
        runs = [(set(run.data.metrics), run.data.tags) for run in self.trial_runs()]
        now = int(time.time() * 1000)
        for key, value in dashboard.dashboard_tags(dashboard.study_metrics(runs), now).items():
            self.client.set_experiment_tag(self.experiment_id, key, value)

    def log_artifacts(self, folder: Path) -> None:
        if self.parent_run_id:
            self.client.log_artifacts(self.parent_run_id, str(folder))

    def log_parent_text(self, text: str, name: str) -> None:
        """`text` as the parent run's artifact `name` (the uncommitted diff of the code that ran)."""
        if self.parent_run_id:
            with tempfile.TemporaryDirectory(prefix="orchestrator_parent_file_") as folder:
                path = Path(folder) / name
                path.write_text(text, encoding="utf-8")
                self.client.log_artifact(self.parent_run_id, str(path))

    # --- reading the trials' runs ---------------------------------------------------------------------------
    def trial_runs(self) -> list:
        """Every trial run of the study (mlflow.entities.Run, or readers.StoredRun: the same fields)."""
        return self.reader.runs(self.experiment_id, ROLE_TAG, "trial")

    def metric_history(self, run_id: str, key: str) -> list:
        """A metric's every logged point (value, step, timestamp)."""
        return self.reader.metric_history(run_id, key)

    def latest_runs(self) -> dict:
        """Each trial identity's most recent run (a trial redone after a failure or a kill has several)."""
        latest: dict = {}
        for run in sorted(self.trial_runs(), key=lambda r: r.info.start_time or 0):
            latest[run.data.tags.get(TRIAL_ID_TAG)] = run
        return latest

    def finished_trial_ids(self, code: str | set[str] | None = None) -> set[str]:
        """Trials trained to their end: a run stopped early by a scheduler does not count as done. With `code`
        (a code fingerprint, or several: each trial's own), only runs of that code count."""
        codes = {code} if isinstance(code, str) else code
        return {run.data.tags.get(TRIAL_ID_TAG) for run in self.trial_runs()
                if run.info.status == "FINISHED" and run.data.tags.get(STOPPED_EARLY_TAG) != "true"
                and (codes is None or run.data.tags.get(CODE_TAG) in codes)}

    def study_experiment_ids(self) -> list[str]:
        """The experiments of every study of this store (those this tool created: tagged STUDY_TAG), this
        study's among them."""
        found = self.reader.experiments_tagged(STUDY_TAG)
        return found if self.experiment_id in found else [self.experiment_id, *found]

    def shared_runs(self, trial_ids: set[str], code: str | set[str] | None = None) -> list:
        """The FINISHED trial runs of the store's other studies whose identity is one of `trial_ids` (trained to
        their end; with `code`, of that code fingerprint): a trial another study finished is this one's too
        (the same identity is the same trial: issue 43). `code`: one fingerprint or several (each trial's own)."""
        if not trial_ids:
            return []
        codes = {code} if isinstance(code, str) else code
        runs = []
        for experiment_id in self.study_experiment_ids():
            if experiment_id == self.experiment_id:
                continue
            runs += [run for run in self.reader.runs(experiment_id, ROLE_TAG, "trial")
                     if run.info.status == "FINISHED" and run.data.tags.get(TRIAL_ID_TAG) in trial_ids
                     and run.data.tags.get(STOPPED_EARLY_TAG) != "true"
                     and (codes is None or run.data.tags.get(CODE_TAG) in codes)]
        return runs

    def failed_trial_ids(self) -> set[str]:
        """Trials whose most recent run FAILED (a later FINISHED run of the same trial wins)."""
        return {trial_id for trial_id, run in self.latest_runs().items() if run.info.status == "FAILED"}

    # --- writing the trials' runs ---------------------------------------------------------------------------
    def mark_stale_runs(self, trial_ids: set[str]) -> int:
        """Close as KILLED the runs of these trials left RUNNING by an orchestrator that died. Call it only with
        trials whose lease this orchestrator holds (`leases.py`): a live orchestrator holds the lease of every
        trial it is running, so a RUNNING run of a trial leased here is nobody's."""
        stale = [run for run in self.trial_runs()
                 if run.info.status == "RUNNING" and run.data.tags.get(TRIAL_ID_TAG) in trial_ids]
        for run in stale:
            self.client.set_tag(run.info.run_id, STALE_TAG, "true")
            self.client.set_terminated(run.info.run_id, status="KILLED")
        return len(stale)

    def create_trial_run(self, run_name: str, tags: dict[str, str], params: dict[str, Any]) -> str:
        from mlflow.entities import Param

        run = self.client.create_run(self.experiment_id, run_name=run_name,
                                     tags={ROLE_TAG: "trial", STUDY_TAG: self.study_name,
                                           PARENT_TAG: self.parent_run_id, **tags})
        self.client.log_batch(run.info.run_id, params=[Param(k, str(v)) for k, v in params.items()])
        return run.info.run_id

    def log_metrics(self, run_id: str, metrics: dict[str, float], step: int, timestamp_ms: int) -> None:
        from mlflow.entities import Metric

        if metrics:
            self.client.log_batch(run_id, metrics=[Metric(k, float(v), timestamp_ms, step) for k, v in metrics.items()])

    def log_series(self, run_id: str, name: str, points: dict[int, float], timestamp_ms: int) -> None:
        """One metric whose step is the x value (e.g. perplexity by evaluation length)."""
        from mlflow.entities import Metric

        self.client.log_batch(run_id, metrics=[Metric(name, float(v), timestamp_ms, int(x)) for x, v in points.items()])

    def log_batch(self, run_id: str, metrics: list[tuple[str, float, int]], tags: dict[str, str],
                  timestamp_ms: int) -> None:
        """Metrics (name, value, step) and tags in one write: one transaction of the store, so that a process
        killed meanwhile leaves all of them or none (an evaluation's values and the tag saying it was done)."""
        from mlflow.entities import Metric, RunTag

        self.client.log_batch(run_id, metrics=[Metric(k, float(v), timestamp_ms, int(step)) for k, v, step in metrics],
                              tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_points(self, run_id: str, points: list[tuple[str, float, int, int]]) -> None:
        """Metric values each with its own time and step, (name, value, time in ms, step), in batches of MLflow's
        limit (1000 metrics a request)."""
        from mlflow.entities import Metric

        for start in range(0, len(points), 1000):
            self.client.log_batch(run_id, metrics=[Metric(name, float(value), ms, step)
                                                   for name, value, ms, step in points[start:start + 1000]])

    def log_params(self, run_id: str, params: dict[str, Any]) -> None:
        from mlflow.entities import Param

        if params:
            self.client.log_batch(run_id, params=[Param(k, str(v)) for k, v in params.items()])

    def log_inputs(self, run_id: str, datasets: list) -> None:
        """MLflow dataset inputs (mlflow.entities.DatasetInput) of a trial's run."""
        if datasets:
            self.client.log_inputs(run_id, datasets=datasets)

    def set_tags(self, run_id: str, tags: dict[str, str]) -> None:
        if self.parent_kept and run_id == self.parent_run_id and self._parent_has("FINISHED", tags):
            return  # a kept parent run (start_parent's `idle`) has them already
        from mlflow.entities import RunTag

        self.client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def end_trial_run(self, run_id: str, status: str) -> None:
        self.client.set_terminated(run_id, status=status)

    def log_artifact(self, run_id: str, path: Path, folder: str | None = None) -> None:
        self.client.log_artifact(run_id, str(path), folder)

    def log_length_table(self, run_id: str) -> None:
        """The run's results by evaluation length, all its lengths so far (those `evaluate` added too), as the
        table artifact run_files.LENGTH_TABLE_FILE: written whole each time (MLflow's own log_table would append
        the lines again), and listed in the run's `mlflow.loggedArtifacts` tag as a table, which makes MLflow's
        UI show it as one ("View as table")."""
        from mlflow.utils.mlflow_tags import MLFLOW_LOGGED_ARTIFACTS

        from .run_files import LENGTH_TABLE_FILE, length_table

        run = self.client.get_run(run_id)
        table = length_table(run.data.metrics)
        if table is None:
            return
        with tempfile.TemporaryDirectory(prefix="orchestrator_run_file_") as folder:
            path = Path(folder) / LENGTH_TABLE_FILE
            path.write_text(json.dumps(table), encoding="utf-8")
            self.client.log_artifact(run_id, str(path))
        listed = json.loads(run.data.tags.get(MLFLOW_LOGGED_ARTIFACTS, "[]"))
        entry = {"path": LENGTH_TABLE_FILE, "type": "table"}
        if entry not in listed:
            self.client.set_tag(run_id, MLFLOW_LOGGED_ARTIFACTS, json.dumps(listed + [entry]))


def _check_ownership(reader, experiment_id: str, tags: dict[str, str], tracking_uri: str, study_name: str) -> None:
    """The experiment is this study's (tagged by this tool); raises ForeignExperiment for anyone else's,
    StoreUnusable for a deleted one."""
    if reader.deleted(experiment_id):
        raise StoreUnusable(
            f"The tracking store {tracking_uri} has a deleted experiment named {study_name!r} (id "
            f"{experiment_id}): restore it (mlflow experiments restore --experiment-id {experiment_id}), "
            "remove it for good (mlflow gc), or give the study another `name:`.")
    if tags.get(STUDY_TAG) == study_name:
        return
    raise ForeignExperiment(
        f"The tracking store {tracking_uri} already has an experiment named {study_name!r} (id "
        f"{experiment_id}) that this tool did not create (it lacks the tag {STUDY_TAG}={study_name}); "
        "its runs are left alone. Give the study another `name:` in its file, or use another store with "
        "--tracking-uri. Nothing was run.")


def _probe_if_server(tracking_uri: str, connect_timeout: float | None) -> None:
    """A tracking server that does not answer fails now, in bounded time (client.probe_server)."""
    if is_server(tracking_uri):
        from .client import DEFAULT_CONNECT_TIMEOUT_S, probe_server

        probe_server(tracking_uri, DEFAULT_CONNECT_TIMEOUT_S if connect_timeout is None else connect_timeout)


def _client(tracking_uri: str):
    from mlflow.tracking import MlflowClient

    from .client import ReachabilityCheckedClient

    # With a server, MLflow prints a "View run at" link per finished run, which would interleave with the progress.
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    return ReachabilityCheckedClient(MlflowClient(tracking_uri), tracking_uri)

"""A stored trial's model for a notebook, by its MLflow run id: the run's artifact folder is resolved (a
local store's in place, a remote one's downloaded) and loaded by `dape_core.stored.load_model`.

    from orchestrator.evaluation.stored import load_run
    stored = load_run("3f2c...", tracking_uri="sqlite:///mlruns/mlflow.db")
    stored.model, stored.config          # the trained CausalLM (eval mode) and its ExperimentConfig
"""

from __future__ import annotations


def load_run(run_id: str, tracking_uri: str | None = None, device: str = "cpu"):
    """The kept model of a trial run (dape_core.stored.StoredModel). Raises LookupError for a run without one,
    dape_core.stored.WeightsUnreadable for damaged files (naming them), WeightsChanged (naming the run and the
    file) for a file whose SHA-256 is not the one its run recorded at save. A run recorded before checksums were
    kept loads unchecked, with a warning saying so."""
    import warnings

    from mlflow.tracking import MlflowClient

    from dape_core.stored import WeightsChanged, load_model

    from ..tracking.checksums import UNCHECKED, recorded_checksums
    from ..tracking.store import WEIGHTS_TAG
    from .worker import weights_folder

    client = MlflowClient(tracking_uri)
    run = client.get_run(run_id)
    if WEIGHTS_TAG not in run.data.tags:
        raise LookupError(f"run {run_id} ({run.info.run_name}) has no kept model (keep_weights: none, or trained "
                          "before trials kept their weights)")
    folder, _ = weights_folder(run.info.artifact_uri, tracking_uri)
    checksums = recorded_checksums(run.data.tags)
    if not checksums:
        warnings.warn(f"run {run_id} ({run.info.run_name}): {UNCHECKED}", stacklevel=2)
    try:
        return load_model(folder, device, checksums or None)
    except WeightsChanged as error:
        raise WeightsChanged(f"run {run_id} ({run.info.run_name}): {error}") from None

"""Before the first trial launches on Ray: one Ray task loads the study's plugins as a trial's process will
(dape_core.plugins.load_shipped: a file plugin from the source the driver sends, a module plugin by name,
with the driver's source hash), so that a plugin importable on the driver but not on the workers (a module
that is not installed there, a file plugin whose own imports are missing there, other code of the same
name) is refused with its reason before anything runs, not found as failed trials later. The same task then
checks the plugins' components against the component contract there (dape_core/contract.py), with the
worker's torch and the code it loaded, for the study's model configs that use them. The task asks for no
resources of the trial's, so it runs wherever Ray places it: on a cluster whose nodes differ, a trial's node
may still differ from the one probed.
"""

from __future__ import annotations

from ..errors import UserInputError

PROBE_TIMEOUT_S = 300.0  # a cold worker imports torch and the plugin


class PluginUnavailable(UserInputError):
    """A study's plugin does not load on a Ray worker."""


def _probe(payloads: list[dict], models: list[tuple[str, dict]]) -> tuple[str | None, list[str]]:
    """(why the plugins do not load, or None; the contract's refusals of `models`, (where, ModelConfig fields))."""
    try:
        from dape_core.plugins import load_shipped

        load_shipped(payloads)
        from dape_core import ModelConfig
        from dape_core.contract import refusals
    except Exception as error:  # noqa: BLE001 - reported to the driver
        return f"{type(error).__name__}: {error}", []
    return None, [f"{where}: {refusal}" for where, fields in models for refusal in refusals(ModelConfig(**fields))]


def require_plugins_on_workers(study, where: str) -> None:
    """PluginUnavailable (exit 2) when a Ray worker cannot load the study's plugins, or their components fail
    the component contract there."""
    import ray

    from ..study.contract_checks import SEE, checked_models
    from ..study.trial_checks import resolved_rows

    payloads = list(study.plugin_payloads())
    modules = {payload["module"] for payload in payloads}
    models = [(place, model.to_dict()) for place, model in checked_models(resolved_rows(study), modules)]
    try:
        problem, refused = ray.get(ray.remote(num_cpus=0)(_probe).remote(payloads, models), timeout=PROBE_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError:
        problem, refused = f"no Ray worker loaded them within {PROBE_TIMEOUT_S:.0f} s", []
    if refused:
        raise PluginUnavailable(f"The study's plugins fail the component contract on a worker of {where}: "
                                f"{'; '.join(refused)}. {SEE}. No trial was run.")
    if problem is not None:
        names = ", ".join(repr(plugin["spec"]) for plugin in payloads)
        raise PluginUnavailable(f"The study's plugins ({names}) load here but not on a worker of {where}: {problem}. "
                                "A .py plugin travels with the study, but its own imports must exist on the workers; "
                                "a module plugin must be importable there (installed, or on their PYTHONPATH) with "
                                "the same source. No trial was run.")

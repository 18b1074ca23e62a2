"""Before the first trial launches on Ray: one Ray task loads the study's plugins as a trial's process will
(dape_core.plugins.load_shipped: a file plugin from the source the driver sends, a module plugin by name,
with the driver's source hash), so that a plugin importable on the driver but not on the workers (a module
that is not installed there, a file plugin whose own imports are missing there, other code of the same
name) is refused with its reason before anything runs, not found as failed trials later. The task asks for
no resources of the trial's, so it runs wherever Ray places it: on a cluster whose nodes differ, a trial's
node may still differ from the one probed.
"""

from __future__ import annotations

from ..errors import UserInputError

PROBE_TIMEOUT_S = 300.0  # a cold worker imports torch and the plugin


class PluginUnavailable(UserInputError):
    """A study's plugin does not load on a Ray worker."""


def _probe(payloads: list[dict]) -> str | None:
    try:
        from dape_core.plugins import load_shipped

        load_shipped(payloads)
    except Exception as error:  # noqa: BLE001 - reported to the driver
        return f"{type(error).__name__}: {error}"
    return None


def require_plugins_on_workers(study, where: str) -> None:
    """PluginUnavailable (exit 2) when a Ray worker cannot load the study's plugins."""
    import ray

    payloads = list(study.plugin_payloads())
    try:
        problem = ray.get(ray.remote(num_cpus=0)(_probe).remote(payloads), timeout=PROBE_TIMEOUT_S)
    except ray.exceptions.GetTimeoutError:
        problem = f"no Ray worker loaded them within {PROBE_TIMEOUT_S:.0f} s"
    if problem is not None:
        names = ", ".join(repr(plugin["spec"]) for plugin in payloads)
        raise PluginUnavailable(f"The study's plugins ({names}) load here but not on a worker of {where}: {problem}. "
                                "A .py plugin travels with the study, but its own imports must exist on the workers; "
                                "a module plugin must be importable there (installed, or on their PYTHONPATH) with "
                                "the same source. No trial was run.")

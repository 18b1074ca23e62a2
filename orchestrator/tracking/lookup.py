"""A study's experiment not found where it was looked for: the error, and the checks that raise it before MLflow
is asked (reading a store that does not exist must not create it). No MLflow here: `orchestrator ui` uses it
without loading MLflow."""

from __future__ import annotations

from .uri import store_missing


class StudyNotFound(LookupError):
    """The tracking store has no experiment for the study (never run there, or the wrong store).

    The message says what was tried and how to point at another store: `tracking_uri=` in Python (str()),
    `describe("--tracking-uri")` on the command line."""

    def __init__(self, problem: str, chosen: str = ""):
        self.problem, self.chosen = problem, chosen
        super().__init__(self.describe())

    def describe(self, option: str = "tracking_uri=") -> str:
        chosen = f" ({self.chosen})" if self.chosen and self.chosen != "given" else ""
        return (f"{self.problem}{chosen}: run the study there first, or pass the store it ran in with {option}"
                "URI (or set MLFLOW_TRACKING_URI)")

    def __str__(self) -> str:
        return self.describe()


def require_store(tracking_uri: str, chosen: str = "") -> None:
    """Raises StudyNotFound where an embedded store does not exist yet (reading must not create it)."""
    missing = store_missing(tracking_uri)
    if missing is not None:
        raise StudyNotFound(f"no tracking store at {missing}", chosen)


def no_experiment(tracking_uri: str, study_name: str, chosen: str = "") -> StudyNotFound:
    return StudyNotFound(f"the tracking store {tracking_uri} has no experiment {study_name!r}", chosen)

"""Console progress: which trial, which step, which loss. One line per event, so it reads well in a terminal
and in a CI log alike."""

from __future__ import annotations

import time

from rich.console import Console

from .trials import Trial


class Progress:
    def __init__(self, total_trials: int, console: Console | None = None, every_steps: int = 100):
        self.console = console or Console(highlight=False, soft_wrap=True)
        self.total = total_trials
        self.every_steps = every_steps
        self.started: dict[str, float] = {}
        self.order: dict[str, int] = {}

    def _tag(self, trial: Trial) -> str:
        number = self.order.setdefault(trial.trial_id, len(self.order) + 1)
        return f"[{number}/{self.total}] {trial.run_name}"

    def message(self, text: str) -> None:
        self.console.print(text)

    def trial_started(self, trial: Trial) -> None:
        self.started[trial.trial_id] = time.monotonic()
        self.console.print(f"{self._tag(trial)}: started")

    def trial_step(self, trial: Trial, step: int, total_steps: int, loss: float | None) -> None:
        if step % self.every_steps and step != total_steps:
            return
        elapsed = time.monotonic() - self.started.get(trial.trial_id, time.monotonic())
        eta = elapsed / step * (total_steps - step) if step else 0.0
        loss_text = f"{loss:.3f}" if loss is not None else "-"
        self.console.print(f"{self._tag(trial)}: step {step}/{total_steps}  loss {loss_text}  "
                           f"{elapsed:.0f}s elapsed, ~{eta:.0f}s to go")

    def trial_evaluated(self, trial: Trial, perplexity: dict[int, float]) -> None:
        cells = "  ".join(f"L={length}: {value:.3f}" for length, value in sorted(perplexity.items()))
        self.console.print(f"{self._tag(trial)}: perplexity {cells}")

    def trial_finished(self, trial: Trial) -> None:
        elapsed = time.monotonic() - self.started.get(trial.trial_id, time.monotonic())
        self.console.print(f"{self._tag(trial)}: [green]finished[/green] in {elapsed:.0f}s")

    def trial_failed(self, trial: Trial, reason: str) -> None:
        self.console.print(f"{self._tag(trial)}: [red]FAILED[/red]: {reason}")

"""Console progress of a study, a listener of the trial events. In a terminal: a live table of trials
(state, step, latest loss, metric, ETA). Elsewhere (CI logs, pipes): one line per event, which reads well
in a file."""

from __future__ import annotations

import time
from dataclasses import dataclass

from rich.console import Console
from rich.live import Live
from rich.table import Table

import dape_core.metric_names as names

from ..trial.protocol import CHECKPOINT_SET_ASIDE_KEY, accuracies, final_metrics, perplexity_by_length
from ..trial.trials import Trial
from .events import TrialFailed, TrialFinished, TrialInterrupted, TrialListener, TrialResult, TrialRetried, TrialStarted


@dataclass
class _Row:
    name: str
    state: str = "running"
    step: int = 0
    total: int = 0
    loss: float | None = None
    metric: str = ""
    started: float = 0.0

    def eta(self) -> str:
        if self.state != "running" or not self.step or not self.total:
            return ""
        seconds = (time.monotonic() - self.started) / self.step * (self.total - self.step)
        return f"{seconds:.0f}s"


class ConsoleProgress(TrialListener):
    def __init__(self, total_trials: int, console: Console | None = None, every_steps: int = 100,
                 live: bool | None = None):
        self.console = console or Console(highlight=False, soft_wrap=True)
        self.total = total_trials
        self.every_steps = every_steps
        self.rows: dict[str, _Row] = {}
        self.live_enabled = self.console.is_terminal if live is None else live
        self._live: Live | None = None

    # --- lifecycle: the runner wraps the study in `with progress:` --------------------------------------
    def __enter__(self) -> "ConsoleProgress":
        if self.live_enabled:
            self._live = Live(self._table(), console=self.console, refresh_per_second=2, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.update(self._table())
            self._live.__exit__(*exc)
            self._live = None

    def _table(self) -> Table:
        table = Table(title=f"trials ({sum(r.state != 'running' for r in self.rows.values())}/{self.total} done)")
        for column in ("#", "trial", "state", "step", "loss", "metric", "ETA"):
            table.add_column(column)
        for number, row in enumerate(self.rows.values(), 1):
            loss = f"{row.loss:.3f}" if row.loss is not None else ""
            style = {"finished": "green", "FAILED": "red", "interrupted": "yellow"}.get(row.state, "")
            table.add_row(str(number), row.name, f"[{style}]{row.state}[/{style}]" if style else row.state,
                          f"{row.step}/{row.total}", loss, row.metric, row.eta())
        return table

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.update(self._table())

    def _line(self, trial: Trial, text: str) -> None:
        if self._live is None:  # the live table already shows it
            number = list(self.rows).index(trial.trial_id) + 1 if trial.trial_id in self.rows else "?"
            self.console.print(f"[{number}/{self.total}] {trial.run_name}: {text}")
        self._refresh()

    # --- events ----------------------------------------------------------------------------------------
    def message(self, text: str) -> None:
        self.console.print(text)

    def _row(self, trial: Trial) -> _Row:
        return self.rows.setdefault(trial.trial_id, _Row(trial.run_name, started=time.monotonic()))

    def trial_started(self, event: TrialStarted) -> None:
        row = self._row(event.trial)
        row.state, row.started = "running", time.monotonic()
        self._line(event.trial, "started")

    def trial_result(self, event: TrialResult) -> None:
        if event.final:
            if event.result.get(names.RESUMED_FROM_STEP) is not None:  # its training went on from a checkpoint
                self._line(event.trial, f"resumed from step {int(event.result[names.RESUMED_FROM_STEP])}")
            if not event.result.get("error"):  # a failure is shown when the trial ends
                metrics = final_metrics(event.result)
                self._evaluated(event.trial, perplexity_by_length(metrics), accuracies(metrics))
        elif event.result.get(CHECKPOINT_SET_ASIDE_KEY):
            self.message(f"{event.trial.run_name}: {event.result[CHECKPOINT_SET_ASIDE_KEY]}")
        elif names.TRAIN_LOSS in event.result:  # validation results carry val_loss only
            self._step(event.trial, event.step, int(event.result.get("total_steps", 0)), event.result[names.TRAIN_LOSS])

    def _step(self, trial: Trial, step: int, total_steps: int, loss: float | None) -> None:
        row = self._row(trial)
        row.step, row.total, row.loss = step, total_steps, loss
        if self._live is not None:
            self._refresh()
            return
        if step % self.every_steps and step != total_steps:
            return
        loss_text = f"{loss:.3f}" if loss is not None else "-"
        elapsed = time.monotonic() - row.started
        self._line(trial, f"step {step}/{total_steps}  loss {loss_text}  {elapsed:.0f}s elapsed, ~{row.eta() or '0s'} "
                          "to go")

    def _evaluated(self, trial: Trial, perplexity: dict[int, float], accuracy: dict[str, float]) -> None:
        row = self._row(trial)
        if perplexity:
            longest = max(perplexity)
            row.metric = f"ppl@{longest} {perplexity[longest]:.3f}"
            cells = "  ".join(f"L={length}: {value:.3f}" for length, value in sorted(perplexity.items()))
            self._line(trial, f"perplexity {cells}")
        elif accuracy:  # a CHE trial: accuracies instead of perplexities
            if names.CHE_ACC_TEST in accuracy:
                row.metric = f"acc test {accuracy[names.CHE_ACC_TEST]:.3f}"
            self._line(trial, "  ".join(f"{name}: {value:.3f}" for name, value in accuracy.items()))

    def trial_finished(self, event: TrialFinished) -> None:
        row = self._row(event.trial)
        row.state = "finished"
        self._line(event.trial, f"[green]finished[/green] in {time.monotonic() - row.started:.0f}s")

    def trial_failed(self, event: TrialFailed) -> None:
        row = self._row(event.trial)
        row.state = "FAILED"
        if self._live is not None:
            self.console.print(f"{event.trial.run_name}: [red]FAILED[/red]: {event.reason}")
        self._line(event.trial, f"[red]FAILED[/red]: {event.reason}")

    def trial_interrupted(self, event: TrialInterrupted) -> None:
        row = self._row(event.trial)
        row.state = "interrupted"
        self._line(event.trial, f"[yellow]interrupted[/yellow] at step {row.step}: closed as KILLED, resumes on the "
                                "next run")

    def trial_retried(self, event: TrialRetried) -> None:
        self.message(f"{event.trial.run_name}: crashed ({event.reason}); retrying")

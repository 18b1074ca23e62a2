"""How many trials shared the machine while each trial trained, so that its in-training timings (`ms_per_step`,
`ms_forward_<L>`) say what they were taken under: `concurrent_trials_max` (the most trials of this orchestrator
running at once, this one included, at any of its progress results) and `concurrent_trials_mean` (their mean
over its progress results, which arrive every `train.log_every` steps: a mean over its training steps).

It counts the trials this orchestrator runs at once, which on one machine are those sharing its CPUs or its
GPU (with `resources.gpus` below 1); on a cluster of several nodes it overcounts (trials on other nodes are
counted too). `orchestrator evaluate --time` times the stored models one at a time instead.
"""

from __future__ import annotations

import dape_core.metric_names as names

from .events import TrialFailed, TrialFinished, TrialInterrupted, TrialListener, TrialResult, TrialStarted


class DeviceSharing(TrialListener):
    """A listener placed before the recorder, which asks it for a trial's figures at its final result."""

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.samples: dict[str, list[int]] = {}

    def trial_started(self, event: TrialStarted) -> None:
        self.running.add(event.key)
        self._sample()

    def trial_result(self, event: TrialResult) -> None:
        self.running.add(event.key)
        self._sample()

    def _sample(self) -> None:
        for key in self.running:
            self.samples.setdefault(key, []).append(len(self.running))

    def _gone(self, key: str) -> None:
        self.running.discard(key)

    def trial_finished(self, event: TrialFinished) -> None:
        self._gone(event.key)

    def trial_failed(self, event: TrialFailed) -> None:
        self._gone(event.key)

    def trial_interrupted(self, event: TrialInterrupted) -> None:
        self._gone(event.key)

    def metrics(self, key: str) -> dict[str, float]:
        samples = self.samples.get(key) or [1]
        return {names.CONCURRENT_TRIALS_MAX: max(samples), names.CONCURRENT_TRIALS_MEAN: sum(samples) / len(samples)}

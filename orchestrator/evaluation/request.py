"""What `orchestrator evaluate` is asked to do to each stored trial, and what is already done: plain data, no torch.

A trial is evaluated again at its own protocol (tail size, windows, split, seed and batch of its `eval:`
section) unless `--tail-tokens` or `--windows` change it. Its evaluation at lengths `L...` scores the tails
its other lengths scored (they are fixed in the held-out stream: `dape_core.data.tail_windows`, protocol
PROTOCOL_VERSION), so `ppl_<L>` is exactly what the trial would have logged had `L` been in the study's
`eval.lengths`. A trial measured under an older protocol (its tag `eval.protocol`; none: 1) has every length
it has scored again with those asked for, so that its row never mixes protocols (docs/protocol.md).

Metrics of the trial's own protocol keep the trial's names (`ppl_<L>`, `delta_p_<L>`, `ms_forward_<L>`, and
the series `ppl_by_length`, `delta_p_by_length`); those of another protocol carry it in their name
(`ppl_<L>.k<tail>.n<windows>`), so that they never mix with the trial's in the report's tables. A length
is done where its metric is in the run: evaluating again skips it (an interrupted evaluation resumes with
what is missing).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import dape_core.metric_names as names

from ..tracking.store import WEIGHTS_TAG
from ..trial.protocol import ISOLATED_PREFIX


@dataclass(frozen=True)
class EvalRequest:
    lengths: tuple[int, ...] = ()  # empty: the trial's own lengths and the study's report.lengths
    tail_tokens: int | None = None
    n_windows: int | None = None
    visualise: bool = False
    time: bool = False  # isolated timing instead of (or besides) perplexity
    time_warmup: int = 5
    time_repeats: int = 20
    again: bool = False  # redo what is already in the runs (new points of the same metrics)

    def eval_section(self, own: dict, later: list[int] | tuple[int, ...] = ()) -> dict:
        """The `eval:` section the trial is evaluated with: its own, with the requested lengths (else the study's
        `later` ones, report.lengths) added and the requested protocol changes."""
        section = dict(own)
        section["lengths"] = sorted(set(own["lengths"]) | set(self.lengths or later))
        if self.tail_tokens is not None:
            section["tail_tokens"] = self.tail_tokens
        if self.n_windows is not None:
            section["n_windows"], section["tokens_per_length"] = self.n_windows, None
        section["visualise"] = self.visualise
        return section

    def suffix(self, own: dict, seq_len: int) -> str:
        """"" for the trial's own protocol, else `.k<tail>.n<windows>` (the metric names' protocol)."""
        tail = self.tail_tokens if self.tail_tokens is not None else own["tail_tokens"]
        windows = self.n_windows if self.n_windows is not None else _windows(own)
        if tail == own["tail_tokens"] and windows == _windows(own):
            return ""
        return f".k{tail}.n{windows}"


def _windows(section: dict) -> int:
    from dape_core.evaluate.config import EvalConfig

    return EvalConfig(**section).windows_per_length


@dataclass
class TrialTask:
    """One stored trial to evaluate: its run, where its weights are, and what is missing."""

    run_id: str
    run_name: str
    trial_id: str
    artifact_uri: str
    config: dict  # the trial's effective config, as its params give it (the stored config.json is the truth)
    lengths: list[int]  # lengths to log (missing ones), each ≥ the training length
    suffix: str
    eval_section: dict
    threads: int
    precision: str | None = None
    device: str | None = None
    visualise: bool = False
    time: bool = False
    warmup: int = 5
    repeats: int = 20
    timed_lengths: list[int] = field(default_factory=list)  # --time: the forward at every length it has ppl for
    che: bool = False  # a CHE model: `lengths` are test lengths, scored as accuracy (acc_<L>)
    rescored: bool = False  # measured under an older protocol: its lengths are scored again though present
    notes: list[str] = field(default_factory=list)
    checksums: dict[str, str] = field(default_factory=dict)  # model file -> SHA-256 its run recorded at save

    def payload(self) -> dict:
        return dict(self.__dict__)


def weights_path(tags: dict[str, str]) -> str | None:
    """The kept model's weights file among the run's artifacts (`model/model.safetensors`), or None."""
    return tags.get(WEIGHTS_TAG)


def missing_lengths(lengths: list[int], metrics: dict, suffix: str) -> list[int]:
    return [length for length in lengths if names.per_length(names.PPL, length) + suffix not in metrics]


def timed(metrics: dict) -> bool:
    return ISOLATED_PREFIX + names.MS_PER_STEP in metrics

"""What `orchestrator plan` shows: one row per trial (a sampling search: one per sample) with its costs, where
each duration comes from, and a legend saying what each column measures.

Durations are measured where the store has finished runs of the same shape (learned.py: their median ms per
step x the trial's steps), else analytic (estimate.py: FLOPs over an assumed throughput).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from dape_core import ExperimentConfig

from ..study import Distribution, Study, resolve
from ..tracking.params import effective_params
from ..trial.trials import StoredIdentities, Trial, expand, shared_rows
from .estimate import CPU_FLOPS_PER_CORE, GPU_FLOPS, TrialEstimate, estimate, evaluation_flops
from .learned import MeasuredSteps, shape_key


@dataclass
class PlanRow:
    name: str
    trial_id: str
    cost: TrialEstimate
    seconds: float
    basis: str  # "measured (n runs)" | "analytic"
    status: str
    seconds_high: float | None = None  # a search sample: the costliest corner of the space
    eval_seconds: float = 0.0  # its evaluation (evaluation_seconds), besides `seconds` of training

    @property
    def total(self) -> float:
        """Training and evaluation; a search sample's costliest corner."""
        return (self.seconds_high or self.seconds) + self.eval_seconds


def _device(study: Study) -> str:
    return "cuda" if study.resources.gpus else "cpu"


def trial_duration(config: dict, study: Study, measured: MeasuredSteps | None,
                   exclude_run: str | None = None) -> tuple[TrialEstimate, float, str]:
    """(analytic estimate, seconds, basis): measured ms/step x steps where the store has the shape."""
    cfg = ExperimentConfig(**config)
    cost = estimate(cfg, study.resources.gpus, study.resources.cpus)
    found = measured.lookup(shape_key(effective_params(config), _device(study)), exclude_run) if measured else None
    if found is None:
        return cost, cost.seconds, "analytic"
    ms, runs = found
    steps = cfg.che.steps if cfg.che is not None else cfg.train.steps
    return cost, ms * steps / 1000, f"measured ({runs} run{'s' if runs > 1 else ''})"


def evaluation_seconds(config: dict, cost: TrialEstimate, seconds: float,
                       later: list[int] | tuple[int, ...] = ()) -> float:
    """The trial's evaluation: its eval.lengths, its training length (ΔP) and `later` (the study's report.lengths
    it scores itself), by their forward FLOPs at the rate its training time (`seconds`, measured or analytic)
    implies for its training FLOPs."""
    cfg = ExperimentConfig(**config)
    steps = cfg.che.steps if cfg.che is not None else cfg.train.steps
    training_flops = cost.flops_per_step * steps
    return seconds * evaluation_flops(cfg, later) / training_flops if training_flops else 0.0


def later_lengths(config: dict, study: Study) -> list[int]:
    """The study's report.lengths a trial scores after its own (orchestrator/evaluation/in_trial.py), for the
    estimate: all those beyond its lengths (the memory check that may leave one to `evaluate_later` instead, which
    then scores it, is not made here); none for a CHE trial or a sampled search."""
    if not study.report.lengths or study.search.sampled:
        return []
    cfg = ExperimentConfig(**config)
    return [] if cfg.che is not None else study.report.later_lengths(cfg.train.seq_len, list(cfg.eval.lengths))


def trial_seconds(config: dict, study: Study, measured: MeasuredSteps | None) -> float:
    """A trial's training and its evaluation, the study's report.lengths it scores itself included."""
    cost, seconds, _ = trial_duration(config, study, measured)
    return seconds + evaluation_seconds(config, cost, seconds, later_lengths(config, study))


def _extremes(dist: Distribution) -> list:
    """A choice's values; a range's low and high."""
    if dist.type == "choice":
        assert dist.values is not None, "a choice has its values (Distribution's validation)"
        return list(dist.values)
    return [dist.low, dist.high]


def _corners(study: Study) -> list[dict]:
    """The search space's extreme points (each choice value; low and high of the ranges): its cost spread."""
    axes = [[(key, value) for value in _extremes(dist)] for key, dist in study.search.space.items()]
    points = [dict(combo) for combo in itertools.product(*axes)]
    return points[:64]


def _sample_rows(study: Study, template: Trial, measured: MeasuredSteps | None) -> list[PlanRow]:
    costs = []
    for point in _corners(study):
        point = {key: (int(value) if study.search.space[key].type == "int" else value) for key, value in point.items()}
        costs.append(trial_duration(ExperimentConfig(**resolve(template.config, point)).to_dict(), study, measured))
    low, high = min(costs, key=lambda c: c[1]), max(costs, key=lambda c: c[1])
    basis = "analytic" if all(c[2] == "analytic" for c in costs) else "measured/analytic"
    return [PlanRow(f"{template.label} · sample {n}/{study.search.num_samples}", "(sampled)", high[0], low[1], basis,
                    "to run", seconds_high=high[1]) for n in range(1, study.search.num_samples + 1)]


def plan_rows(study: Study, measured: MeasuredSteps | None, finished: set[str]) -> list[PlanRow]:
    """A row that shares another row's trial (it differs only in settings the trial does not read) says
    "shared with #N" (N: that row's number) and costs nothing: the trial runs once."""
    rows: list[PlanRow] = []
    trials = expand(study)
    stored, shared = StoredIdentities(trials), shared_rows(trials)
    for position, trial in enumerate(trials):
        if study.search.sampled:
            rows += _sample_rows(study, trial, measured)
            continue
        cost, seconds, basis = trial_duration(trial.config, study, measured)
        if position in shared:
            rows.append(PlanRow(trial.run_name, trial.trial_id, cost, 0.0, "-", f"shared with #{shared[position] + 1}"))
            continue
        rows.append(PlanRow(trial.run_name, trial.trial_id, cost, seconds, basis,
                            "finished" if stored.done(trial, finished) else "to run",
                            eval_seconds=evaluation_seconds(trial.config, cost, seconds,
                                                            later_lengths(trial.config, study))))
    return rows


def short_legend() -> list[str]:
    """The plan's notes in two lines (`plan` without --explain)."""
    return ["Notes: est. time 'analytic' is an order of magnitude (assumed FLOP rates), 'measured' this store's "
            "runs; GiB/worker is the model's training memory, not a trial's peak.",
            "plan --explain: how each column is estimated, each claim's expected seeds, the weights each trial keeps."]


def legend(study: Study) -> list[str]:
    cpu = CPU_FLOPS_PER_CORE / 1e9
    gpu = GPU_FLOPS / 1e12
    lines = [
        "params: the model's parameter count (analytic, exact). GFLOP/step: forward + backward FLOPs of one "
        "training step (3x the forward), processor included.",
        "workers: the trial's size (distributed.workers, else resources.workers) and, with several, its "
        "parallelism. GiB/worker: estimated training memory of the model alone on one worker: fp32 weights, "
        "gradients and AdamW moments (16 bytes per parameter; DDP 4 more for its gradient buckets; FSDP 16 / "
        "workers plus a gathered block) plus the activations of one micro-batch of the worker's share. It is not "
        "the peak_memory_mb a trial logs, which on CPU is the whole trial process's peak RSS (Python, torch, data) "
        "and on a GPU the CUDA allocator's peak. fits: GiB/worker within resources.gpu_memory_gb.",
        "est. time: the trial's training steps and its evaluation (its eval.lengths, and the study's report.lengths "
        "it scores itself), without start-up; the evaluation is its forward FLOPs at the rate its training time "
        "implies. measured: the median ms_per_step of "
        "finished runs in this store (any experiment) with the same model shape, processor and kernel, sequence "
        "length, batch, precision and device kind, x the steps. analytic: GFLOP/step x steps over an assumed "
        f"sustained throughput of {cpu:g} GFLOP/s per CPU core x resources.cpus on CPU, or {gpu:g} TFLOP/s per "
        "GPU (bf16 at about 40% of an H100/H200's dense peak) x resources.gpus, times the workers (ideal scaling): "
        "an order of magnitude.",
    ]
    return lines + search_note(study)


def search_note(study: Study) -> list[str]:
    """What a sampled search's rows are (shown with or without --explain: it says what the table's rows mean)."""
    if not study.search.sampled:
        return []
    return [f"Search ({study.search.algorithm}): one row per sample ({study.search.num_samples}); the sampled "
            "values are not known before it runs, so est. time spans the cheapest to the costliest corner of the "
            "space; an early-stopping scheduler ends some samples sooner."]

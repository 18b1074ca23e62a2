"""One experiment = data + model + training + evaluation, returned as one structured result.

This is the unit a study trial runs. It is independent of any orchestrator: progress goes to a callback
(see `dape_core.train.TrainerCallback`), and checkpoints to a directory the caller names.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Sequence, cast

import dape_core.metric_names as names

# Only the config sections at import: validating a study (the orchestrator's `validate`, `plan`) must not
# load torch. The functions that run an experiment import what they need when called.
from .experiment_config import ExperimentConfig

if TYPE_CHECKING:
    from .train import CheckpointStore
    from .train.distributed import World


@dataclass
class LaterScores:
    """Lengths scored after the experiment's own evaluation, on the trained model, without changing its config
    (a study's `report.lengths`): the values `evaluate_stored(model, cfg, lengths=...)` gives for its stored
    model (the same windows, the same code; no forward timing, no maps). `error`: why they could not be
    scored (held-out text too short, memory): the experiment's own results stand, the caller scores them later."""

    lengths: list[int]
    perplexity: dict[int, float] = field(default_factory=dict)
    delta_p: dict[int, float] = field(default_factory=dict)
    seconds: float = 0.0
    eval_protocol: int | None = None
    error: str | None = None


@dataclass
class ExperimentResult:
    perplexity: dict[int, float]
    final_train_loss: float
    train_seconds: float
    eval_seconds: float
    tokens_seen: int
    num_parameters: int
    data_hash: str
    delta_p: dict[int, float] = field(default_factory=dict)  # ΔP(L) = P(T_train) − P(L); > 0: context helps
    ms_per_step: float | None = None  # median ms of one training step (forward + backward + update; on several
    # workers rank 0's, which the per-step gradient reduction keeps in step with the others)
    ms_forward: dict[int, float] = field(default_factory=dict)  # median ms of one eval-batch forward at L
    flops_per_token: float = 0.0  # analytic forward FLOPs per token at the training length
    peak_memory_bytes: int = 0  # CUDA allocator peak, or the process's peak RSS on CPU; the largest worker's
    device: str = "cpu"
    precision: str = "fp32"
    artifacts: list[str] = field(default_factory=list)  # attention heat maps and their arrays
    val_history: list[tuple[int, float]] = field(default_factory=list)
    data_record: dict = field(default_factory=dict)  # source, split seed, fractions, tokens per split
    resumed_from: int | None = None
    che_acc_train: float | None = None  # CHE experiments: accuracy averaged over the training lengths
    che_acc_test: float | None = None  # ... and over the test lengths
    che_accuracy: dict[int, float] = field(default_factory=dict)  # ... per test length
    # The fused attention kernels (dape_core.fused), per configuration: the tiles they ran with, or why they did
    # not launch on this GPU and the layers ran on their other paths; "" where they were not tried (CPU).
    attention_kernels: str = ""
    weights: list[str] = field(default_factory=list)  # the stored model's files (dape_core.stored), if kept
    weights_seconds: float = 0.0  # the time writing them took
    # The evaluation protocol its per-length perplexities were measured under (dape_core.data.PROTOCOL_VERSION;
    # docs/protocol.md); None where there are none (CHE).
    eval_protocol: int | None = None
    # The caller's later lengths (run_experiment's `later_lengths`), scored after the rest: None where none were asked.
    later: LaterScores | None = None

    def metrics(self) -> dict[str, float]:
        """Flat numeric metrics, named as the orchestrator logs them (dape_core/metric_names.py)."""
        out = {names.TRAIN_LOSS: self.final_train_loss, names.TRAIN_SECONDS: self.train_seconds,  # by name, not by
               names.EVAL_SECONDS: self.eval_seconds, names.TOKENS_SEEN: self.tokens_seen,  # SCALARS' positions
               names.NUM_PARAMETERS: self.num_parameters, names.FLOPS_PER_TOKEN: self.flops_per_token,
               names.PEAK_MEMORY_MB: self.peak_memory_bytes / 2**20}
        if self.ms_per_step is not None:
            out[names.MS_PER_STEP] = self.ms_per_step
        if self.weights:
            out[names.WEIGHTS_SECONDS] = self.weights_seconds
        later = self.later or LaterScores(lengths=[])
        for prefix, by_length in ((names.PPL, {**self.perplexity, **later.perplexity}),
                                  (names.DELTA_P, {**self.delta_p, **later.delta_p}),
                                  (names.MS_FORWARD, self.ms_forward)):
            out.update({names.per_length(prefix, length): value for length, value in by_length.items()})
        if self.che_acc_test is not None:
            assert self.che_acc_train is not None, "a CHE result has both accuracies"
            out[names.CHE_ACC_TRAIN], out[names.CHE_ACC_TEST] = self.che_acc_train, self.che_acc_test
            out.update({names.per_length(names.ACC, length): value for length, value in self.che_accuracy.items()})
        return out


def check_vocabulary(cfg: ExperimentConfig, corpus_vocab: int, tokenizer: str) -> None:
    if cfg.model.vocab_size < corpus_vocab:
        raise ValueError(f"model.vocab_size={cfg.model.vocab_size} is smaller than the data's vocabulary of "
                         f"{corpus_vocab} (tokenizer {tokenizer}): set model.vocab_size to at least {corpus_vocab}")


def run_experiment(cfg: ExperimentConfig, callback=None, threads: int | None = None, *,
                   checkpoint_dir: str | Path | None = None, checkpoint_every: int | None = None,
                   resume: bool = True, artifacts_dir: str | Path | None = None,
                   weights_dir: str | Path | None = None, later_lengths: Sequence[int] = ()) -> ExperimentResult | None:
    """Train and evaluate one config. Every data problem (missing files, held-out text too short for the
    longest evaluation length, ids beyond the vocabulary) is raised before training starts.

    checkpoint_dir: save there every `checkpoint_every` steps and at the end (`trainer.pt` on one worker,
    sharded checkpoints on several); with `resume`, continue from the one already there. artifacts_dir:
    where `eval.visualise` writes its heat maps. weights_dir: where the trained model is kept (its weights,
    config and data record: `dape_core.stored.save_model`; a sharded model gathered first), before it is
    evaluated (a CHE experiment's data record is its task and lengths). later_lengths: lengths scored last, on
    the trained model, outside the config (a study's `report.lengths`): `result.later` (LaterScores), in its
    metrics as ppl_<L>/delta_p_<L>, exactly as `evaluate_stored` scores them on the stored model; a failure there
    is `result.later.error`, never the experiment's (a language-model experiment's; CHE ignores them).

    With `cfg.distributed.workers` > 1, call it on every rank of a torch.distributed process group of that
    size (initialized by the caller). Every rank trains; rank 0 alone evaluates and returns the result,
    while the other ranks wait for it at a barrier and return None.
    """
    import torch

    from .allocator import keep_freed_memory
    from .fused import recorded, start_record
    from .train import CheckpointStore
    from .train.distributed import World, check_world

    if threads:
        torch.set_num_threads(threads)
    keep_freed_memory()  # no page faults on every step's score maps (allocator.py)
    world = World.current()
    check_world(cfg.distributed, world)
    checkpoints = CheckpointStore(checkpoint_dir, cfg.fingerprint()) if checkpoint_dir is not None else None
    start_record()
    result: ExperimentResult | None
    if cfg.che is not None:
        result = _run_che_experiment(cfg, callback, checkpoints, checkpoint_every, resume, weights_dir)
    else:
        result = _run_lm_experiment(cfg, callback, checkpoints, checkpoint_every, resume, artifacts_dir, world,
                                    weights_dir, later_lengths)
    if result is not None:
        result.attention_kernels = recorded()
    return result


def _run_lm_experiment(cfg: ExperimentConfig, callback, checkpoints: CheckpointStore | None,
                       checkpoint_every: int | None, resume: bool, artifacts_dir, world: World,
                       weights_dir=None, later_lengths: Sequence[int] = ()) -> ExperimentResult | None:
    import torch

    from .data import TrainStream, load_corpus
    from .evaluate import forward_flops_per_token, peak_memory_bytes, reset_peak_memory
    from .model import CausalLM, build_model
    from .train import resolve_device, resolve_precision, train
    from .train.distributed import full_model_on_rank_zero, local_device, parallelize

    device = local_device(resolve_device(cfg.train.device), world)
    precision = resolve_precision(cfg.train.precision, device)
    torch.manual_seed(cfg.train.seed)  # the same initial weights on every rank
    corpus = load_corpus(cfg.data)
    check_vocabulary(cfg, corpus.vocab_size, corpus.record["tokenizer"])
    # Evaluation windows before training: held-out text too short for the protocol fails now, on every rank.
    seq_len = cfg.train.seq_len
    windows = protocol_windows(cfg, corpus)
    stream = TrainStream(corpus.stream_regions(), seq_len, seed=cfg.train.seed, rank=world.rank,
                         world_size=world.size)
    build = functools.partial(build_model, cfg.model, seed=cfg.train.seed)
    model = parallelize(build().to(device), cfg.distributed, world, precision)

    reset_peak_memory(device)
    trained = train(model, stream, cfg.train, callback, precision=precision, validate=_validation(model, corpus, cfg,
                    precision), checkpoints=checkpoints, checkpoint_every=checkpoint_every, resume=resume, world=world)
    training_peak = int(world.max(peak_memory_bytes(device), device))  # the largest worker's (a count of bytes)
    plain = full_model_on_rank_zero(model, build, device, world)
    if plain is None:  # a rank other than 0: rank 0 evaluates and reports
        world.barrier()
        return None
    evaluated = cast(CausalLM, plain)  # build_model's model, unwrapped or gathered (typed as any nn.Module there)
    weights, weights_seconds = [], 0.0
    if weights_dir is not None:
        from .stored import save_model

        started = time.perf_counter()
        weights = [str(path) for path in save_model(evaluated, cfg, corpus.content_hash, corpus.record, weights_dir)]
        weights_seconds = time.perf_counter() - started
    result = ExperimentResult(
        **_evaluate(evaluated, windows, cfg, precision, artifacts_dir, corpus),
        final_train_loss=trained.final_loss,
        train_seconds=trained.train_seconds,
        tokens_seen=trained.tokens_seen,
        num_parameters=evaluated.num_parameters(),
        data_hash=corpus.content_hash,
        ms_per_step=trained.ms_per_step,
        flops_per_token=forward_flops_per_token(evaluated, seq_len),
        peak_memory_bytes=max(training_peak, peak_memory_bytes(device)),
        device=str(device),
        precision=precision.name,
        val_history=trained.val_history,
        data_record=corpus.record,
        resumed_from=trained.resumed_from,
        weights=weights,
        weights_seconds=weights_seconds,
    )
    if later_lengths:  # after the peak memory above: the trial's own figure, as without them
        result.later = score_later(evaluated, cfg, corpus, precision.name, later_lengths)
    world.barrier()
    return result


def score_later(model, cfg: ExperimentConfig, corpus, precision: str, lengths: Sequence[int]) -> LaterScores:
    """`lengths` scored on a trained model as `orchestrator evaluate` scores a stored one: its own `eval:`
    protocol with the lengths added, no timing and no maps, `evaluate_stored` at those lengths only (and the
    training length, for ΔP). Any error is the LaterScores' `error`, the model's results standing."""
    wanted = sorted(set(lengths))
    started = time.perf_counter()
    quiet = dataclasses.replace(cfg, eval=dataclasses.replace(
        cfg.eval, lengths=sorted(set(cfg.eval.lengths) | set(wanted)), visualise=False, timing=False))
    try:
        scored = evaluate_stored(model, quiet, None, corpus, precision, lengths=wanted)
    except Exception as error:  # the caller (the orchestrator's `evaluate_later`) tries them again and reports it
        return LaterScores(lengths=wanted, seconds=time.perf_counter() - started,
                           error=f"{type(error).__name__}: {error}")
    return LaterScores(lengths=wanted, perplexity={length: scored["perplexity"][length] for length in wanted},
                       delta_p={length: value for length, value in scored["delta_p"].items() if length in wanted},
                       seconds=time.perf_counter() - started, eval_protocol=scored["eval_protocol"])


def protocol_windows(cfg: ExperimentConfig, corpus, lengths: list[int] | None = None) -> dict:
    """The evaluation windows of every length of `cfg.eval` and of the training length (ΔP needs it), or of
    `lengths` only: protocol `PROTOCOL_VERSION` (docs/protocol.md). Their tails are fixed in the held-out
    stream whatever the lengths, so a stored model evaluated later at any length scores the tokens a trial
    with that length in its `eval.lengths` scored, and the same tokens as at its other lengths."""
    from .data import tail_windows

    if lengths is None:
        lengths = sorted(set(cfg.eval.lengths) | {cfg.train.seq_len})
    return tail_windows(corpus.stream_regions(cfg.eval.split), lengths, cfg.eval.windows_per_length,
                        cfg.eval.tail_tokens, cfg.eval.seed)


def evaluate_stored(model, cfg: ExperimentConfig, artifacts_dir=None, corpus=None, precision: str | None = None,
                    lengths: list[int] | None = None) -> dict:
    """The evaluation protocol of `cfg.eval` on an already trained model (`dape_core.stored.load_model`),
    without training: the ExperimentResult fields perplexity, delta_p, eval_seconds, ms_forward, artifacts and
    eval_protocol, computed as `run_experiment` computes them (bit-identical on CPU at the same thread count).
    lengths: score only these (and the training length, for ΔP): the same values as with all of `cfg.eval.lengths`
    (the windows of a length do not depend on the others), without the cost of the others."""
    from .data import load_corpus
    from .train import resolve_precision

    corpus = corpus or load_corpus(cfg.data)
    device = next(model.parameters()).device
    if lengths is not None:
        windows = protocol_windows(cfg, corpus, sorted(set(lengths) | {cfg.train.seq_len}))
        cfg = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, lengths=sorted(set(lengths))))
    else:
        windows = protocol_windows(cfg, corpus)
    return _evaluate(model, windows, cfg, resolve_precision(precision or cfg.train.precision, device), artifacts_dir,
                     corpus)


def visualise_title(cfg: ExperimentConfig, length: int) -> str:
    """What a map shows, for its title: the variant (encoding and processor), the kernel, the training length
    and the evaluation length."""
    model = cfg.model
    processor = model.processor_facts.label  # its record's label (dape_core/components.py)
    if model.kernel_shape is not None:
        rows, columns = model.kernel_shape
        processor += f", kernel {rows}×{columns}"
    return (f"{model.encoding.label} + {processor}; trained at L={cfg.train.seq_len}, "
            f"evaluated at L={length}")


def visualise(model, cfg: ExperimentConfig, corpus, artifacts_dir=None, length: int | None = None) -> list[str]:
    """The papers' attention maps (evaluate/visualise.py) of a trained model on one window: the first `length`
    tokens (default: the longest evaluation length) of the held-out stream of `cfg.eval.split`, the same for
    every trial. Returns the files (a PNG per layer, the arrays), in `artifacts_dir` (default: a new folder)."""
    from .evaluate import attention_maps, save_attention_maps, visualise_window

    length = length or max(cfg.eval.lengths)
    folder = Path(artifacts_dir) if artifacts_dir is not None else Path(tempfile.mkdtemp(prefix="dape_attention_"))
    device = next(model.parameters()).device
    tokens = visualise_window(corpus.stream_regions(cfg.eval.split), length).to(device)
    title = visualise_title(cfg, length) + f"; window: held-out tokens 0–{length - 1}"
    return [str(path) for path in save_attention_maps(attention_maps(model, tokens), folder, title, length)]


def _validation(model, corpus, cfg: ExperimentConfig, precision):
    """`train.eval_every`'s held-out loss on fixed windows. Under torch.distributed every rank computes it on
    the same windows (a DDP replica alone; FSDP's forward is collective, so every rank must take part): the
    value is the same everywhere and is cheap next to training (`train.val_tokens` tokens)."""
    if not cfg.train.eval_every:
        return None
    from .data import evaluation_windows
    from .evaluate import tail_loss
    from .train.distributed import unwrap

    seq_len = cfg.train.seq_len
    val_windows = evaluation_windows(corpus.validation, [seq_len], math.ceil(cfg.train.val_tokens / seq_len),
                                     seed=cfg.eval.seed + 1, strict=False)[seq_len]
    return functools.partial(tail_loss, unwrap(model), val_windows, seq_len, cfg.eval.batch_size, precision)


def _evaluate(model, windows: dict, cfg: ExperimentConfig, precision, artifacts_dir, corpus) -> dict:
    """The evaluation protocol on the trained model: perplexity and ΔP by length, then (optionally) the
    forward time per length and the heat maps. Returns those ExperimentResult fields."""
    from .evaluate import delta_p, forward_ms_from_evaluation, perplexity_by_length
    from .evaluate.config import PROTOCOL_VERSION

    started = time.perf_counter()
    batch_ms: dict[int, list[float]] | None = {} if cfg.eval.timing else None
    all_lengths = perplexity_by_length(model, windows, cfg.eval, precision, batch_ms)
    perplexity = {length: all_lengths[length] for length in cfg.eval.lengths}
    gains = {length: value for length, value in delta_p(all_lengths, cfg.train.seq_len).items() if length in perplexity}
    eval_seconds = time.perf_counter() - started
    ms_forward = {}
    if cfg.eval.timing:  # the evaluation's own batches, warm-up dropped: no extra passes in the usual case
        timed = {length: windows[length] for length in cfg.eval.lengths}
        assert batch_ms is not None  # timing on: perplexity_by_length recorded the batches' times
        ms_forward = forward_ms_from_evaluation(model, timed, batch_ms, cfg.eval, precision)
    artifacts = []
    if cfg.eval.visualise:
        artifacts = visualise(model, cfg, corpus, artifacts_dir)
    return {"perplexity": perplexity, "delta_p": gains, "eval_seconds": eval_seconds, "ms_forward": ms_forward,
            "artifacts": artifacts, "eval_protocol": PROTOCOL_VERSION}


def _run_che_experiment(cfg: ExperimentConfig, callback, checkpoints: CheckpointStore | None,
                        checkpoint_every: int | None, resume: bool, weights_dir=None) -> ExperimentResult:
    """The CHE path: no corpus, no perplexity; accuracies instead. Checkpoints and resume as for the LM."""
    from .che.experiment import run_che

    assert cfg.che is not None, "the CHE path runs for a config with a che section"
    task_record = che_task_record(cfg)
    data_hash = hashlib.sha256(json.dumps(task_record, sort_keys=True).encode()).hexdigest()[:16]
    weights: list[str] = []
    weights_seconds: list[float] = []

    def keep(model) -> None:
        from .stored import save_model

        started = time.perf_counter()
        weights.extend(str(path) for path in save_model(model, cfg, data_hash, task_record, weights_dir))
        weights_seconds.append(time.perf_counter() - started)

    result = run_che(cfg.che, cfg.model, cfg.train, callback, checkpoints=checkpoints,
                     checkpoint_every=checkpoint_every, resume=resume,
                     on_trained=keep if weights_dir is not None else None)
    return ExperimentResult(
        perplexity={},
        final_train_loss=result.final_train_loss,
        train_seconds=result.train_seconds,
        eval_seconds=result.eval_seconds,
        tokens_seen=result.tokens_seen,
        num_parameters=result.num_parameters,
        data_hash=data_hash,
        ms_per_step=result.ms_per_step,
        device=result.device,
        precision=result.precision,
        data_record=task_record,
        che_acc_train=result.acc_train,
        che_acc_test=result.acc_test,
        che_accuracy=result.accuracy,
        val_history=result.val_history,
        resumed_from=result.resumed_from,
        weights=weights,
        weights_seconds=sum(weights_seconds),
    )


def che_task_record(cfg: ExperimentConfig) -> dict:
    """What a CHE trial's data was: the task and its lengths (its hash is the trial's data hash)."""
    assert cfg.che is not None, "a CHE trial's config has a che section"
    return {"source": "che", "task": cfg.che.task, "form": cfg.che.form,
            "train_max_length": cfg.che.train_max_length, "test_lengths": cfg.che.test_lengths}


def evaluate_stored_che(model, cfg: ExperimentConfig, lengths: list[int], precision: str | None = None) -> dict:
    """A stored CHE model's accuracy at test `lengths`, without training: exactly (on CPU) what a trial of this
    config with `lengths` added to its `che.test_lengths` logs for them (the evaluation strings of every length
    before them are drawn first, as in that trial). Returns {length: accuracy}."""
    from .che.experiment import accuracies
    from .train import resolve_precision

    device = next(model.parameters()).device
    assert cfg.che is not None, "a stored CHE model's config has a che section"
    che = dataclasses.replace(cfg.che, test_lengths=sorted(set(cfg.che.test_lengths) | set(lengths)))
    resolved = resolve_precision(precision or cfg.train.precision, device)
    return accuracies(model, che, cfg.train.seed, device, resolved, only=set(lengths))[1]

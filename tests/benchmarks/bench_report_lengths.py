"""What `orchestrator run` adds by scoring a study's report.lengths after training, against the trial's own work,
measured in one process on one thread (a trial's slot), so that the ratio holds on a shared machine.

    python tests/benchmarks/bench_report_lengths.py [--study studies/kernel_size.yaml] [--variant DAPE1x3-Kerple]
                                                      [--steps 20]

For one row of the study (its effective config): the median time of a training step (batch and length of the
study; timed over --steps steps after 3 warm-up steps) and the time of its in-training evaluation at its own
lengths, against the time of `dape_core.experiment.evaluate_stored` at the study's report.lengths (what the
evaluation task of `run` computes, without loading the model). The trial's work is projected to the study's
train.steps. The ratio is the evaluation's share of a trial slot's work: the main job's trial phase grows by about
that share (the evaluations run two at a time on 2 cores, as the trials do).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", default=str(ROOT / "studies" / "kernel_size.yaml"))
    parser.add_argument("--variant", default="DAPE1x3-Kerple")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()

    import torch

    from dape_core import ExperimentConfig, build_model
    from dape_core.data import TrainStream, load_corpus
    from dape_core.experiment import evaluate_stored
    from orchestrator.study import load_study
    from orchestrator.trial.trials import expand

    torch.set_num_threads(1)
    study = load_study(Path(args.study))
    trial = next(t for t in expand(study) if t.label == args.variant)
    cfg = ExperimentConfig(**trial.config)
    later = study.report.later_lengths(cfg.train.seq_len, cfg.eval.lengths)
    corpus = load_corpus(cfg.data)
    torch.manual_seed(0)
    model = build_model(cfg.model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.train.lr)
    stream = TrainStream(corpus.stream_regions(), cfg.train.seq_len, seed=0)
    times = []
    model.train()
    for step in range(3 + args.steps):
        batch = stream.batch(cfg.train.batch_size)
        started = time.perf_counter()
        logits = model(batch.inputs)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step >= 3:
            times.append(time.perf_counter() - started)
    step_s = statistics.median(times)
    quiet = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, timing=False))
    started = time.perf_counter()
    evaluate_stored(model.eval(), quiet, corpus=corpus)
    own_eval_s = time.perf_counter() - started
    later_lengths = sorted(set(cfg.eval.lengths) | set(later))
    later_cfg = dataclasses.replace(quiet, eval=dataclasses.replace(quiet.eval, lengths=later_lengths))
    started = time.perf_counter()
    evaluate_stored(model, later_cfg, corpus=corpus, lengths=later)
    later_s = time.perf_counter() - started
    trial_s = cfg.train.steps * step_s + own_eval_s
    print(f"{Path(args.study).stem} / {args.variant}, one thread: step {1000 * step_s:.0f} ms (median of "
          f"{args.steps}), {cfg.train.steps} steps + evaluation at {cfg.eval.lengths}: {trial_s:.1f} s; "
          f"report.lengths {later}: {later_s:.1f} s")
    print(f"ratio (report.lengths evaluation / trial work): {later_s / trial_s:.2f}")


if __name__ == "__main__":
    main()

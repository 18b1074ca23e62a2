"""CPU-scale CHE accuracy: one run per (task, model), accuracy on the training lengths and on test lengths.

    python tests/benchmarks/bench_che_accuracy.py                       # the studies/che.yaml default scale
    python tests/benchmarks/bench_che_accuracy.py --tasks cycle_navigation reverse_string --steps 1000 \
        --models Kerple DAPE1x3-Kerple --train-max-length 40 --test-lengths 41 60 100

Defaults are the CPU default of studies/che.yaml (2 layers, width 64, 4 heads, training lengths U(1, 20),
1000 steps of batch 64, lr 3e-3, test lengths 21, 40, 80); these are smoke-scale figures, not the paper's
(5 layers, 200k steps of batch 128, training lengths U(1, 40), test lengths 41..500).
"""

from __future__ import annotations

import argparse
import time

import torch

from dape_core import CheConfig, ModelConfig, TrainConfig, run_che

MODELS = {
    "Kerple": {"processor": "none"},
    "DAPE-Kerple": {"processor": "dapev2", "kernel_size": 1},
    "DAPE1x3-Kerple": {"processor": "dapev2", "kernel_size": 3},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", nargs="+",
                        default=["parity_check", "even_pairs", "cycle_navigation", "reverse_string"])
    parser.add_argument("--models", nargs="+", default=["Kerple", "DAPE1x3-Kerple"], choices=list(MODELS))
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--train-max-length", type=int, default=20)
    parser.add_argument("--test-lengths", nargs="+", type=int, default=[21, 40, 80])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    header = f"{'task':<22} {'model':<16} {'acc train':>9} {'acc test':>9}  " + "  ".join(
        f"{'L=' + str(n):>6}" for n in args.test_lengths) + "  seconds"
    print(header)
    for task in args.tasks:
        for label in args.models:
            cfg = CheConfig(task=task, train_max_length=args.train_max_length, test_lengths=args.test_lengths,
                            steps=args.steps, batch_size=args.batch_size, lr=args.lr, eval_batches=1)
            model = ModelConfig(preset="tiny", n_layer=2, d_model=64, n_head=4, pos_encoding="kerple", d_dape=16,
                                **MODELS[label])
            started = time.perf_counter()
            result = run_che(cfg, model, TrainConfig(warmup_fraction=0.05, seed=args.seed))
            cells = "  ".join(f"{result.accuracy[n]:>6.3f}" for n in cfg.test_lengths)
            print(f"{task:<22} {label:<16} {result.acc_train:>9.3f} {result.acc_test:>9.3f}  {cells}  "
                  f"{time.perf_counter() - started:7.1f}", flush=True)


if __name__ == "__main__":
    main()

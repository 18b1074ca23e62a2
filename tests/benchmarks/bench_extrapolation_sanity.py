"""Seed spread of the CPU sanity scale (tests/test_train_sanity.py): RoPE vs Kerple trained at length 32,
perplexity at 32..256 and ΔP, one line per model and seed.

    python tests/benchmarks/bench_extrapolation_sanity.py --seeds 0,1,2,3 --steps 600
"""

from __future__ import annotations

import argparse

from dape_core import ExperimentConfig, run_experiment

LENGTHS = [32, 64, 128, 256]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2,3")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--encodings", default="rope,kerple")
    args = parser.parse_args()
    print("| model | seed | " + " | ".join(f"ppl {L}" for L in LENGTHS) + " | ppl 256 / ppl 32 | ΔP(256) | ms/step |")
    print("|" + "---|" * (len(LENGTHS) + 5))
    for seed in (int(s) for s in args.seeds.split(",")):
        for encoding in args.encodings.split(","):
            cfg = ExperimentConfig(
                model={"preset": "tiny", "pos_encoding": encoding},
                train={"steps": args.steps, "batch_size": 32, "seq_len": 32, "seed": seed},
                eval={"lengths": LENGTHS, "tail_tokens": 32, "tokens_per_length": 2048},
            )
            r = run_experiment(cfg, threads=1)
            cells = " | ".join(f"{r.perplexity[L]:.3f}" for L in LENGTHS)
            ratio = r.perplexity[256] / r.perplexity[32]
            print(f"| {encoding} | {seed} | {cells} | {ratio:.3f} | {r.delta_p[256]:+.3f} | {r.ms_per_step:.1f} |",
                  flush=True)


if __name__ == "__main__":
    main()

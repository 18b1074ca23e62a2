"""Multi-worker training against one worker: equivalence on CPU, and FSDP's own cost per step on a GPU.

    python tests/benchmarks/bench_distributed.py          # a GPU if there is one, else the CPU version
    python tests/benchmarks/bench_distributed.py --cpu    # tiny model, gloo: 1 vs 2 workers (DDP, FSDP)

CPU (gloo, a tiny model, 2 processes): one experiment on one worker, then on two with DDP and with FSDP, the
same global batch; prints the largest difference of the loss curves (every step) and of the evaluation
perplexities against one worker, and ms per step. Then one worker's step on the plain trainer against the
same step with the model wrapped in FSDP over a process group of one (FSDP's own overhead).

GPU (one device): the second comparison at paper scale: a 350M DAPE1x3-Kerple step (batch 8 x 512 tokens,
bf16, attention in 64-row blocks) on the single-device trainer (bf16 autocast) against the same step under
FSDP2 with a world size of one (bf16 parameters, fp32 gradient reduction): ms per step and peak CUDA memory,
with their ratios.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: distributed_support

from distributed_support import max_abs_difference, run_job, run_on_workers, with_workers  # noqa: E402

from dape_core import build_model  # noqa: E402
from dape_core.config import ModelConfig  # noqa: E402
from dape_core.data import DataConfig, TrainStream, load_corpus  # noqa: E402
from dape_core.train import TrainConfig, World, resolve_precision, train  # noqa: E402
from dape_core.train.distributed import shard_model  # noqa: E402

TINY = {
    "model": {"preset": "tiny", "pos_encoding": "kerple", "processor": "dapev2", "d_dape": 8},
    "data": {"max_files": 60},
    "train": {"steps": 20, "batch_size": 8, "grad_accum": 2, "seq_len": 32, "log_every": 1},
    "eval": {"lengths": [32, 64, 256], "tail_tokens": 16, "n_windows": 8, "timing": False},
}


def equivalence_table() -> None:
    one = run_job(TINY)
    ddp, fsdp = run_on_workers(2, [{"config": with_workers(TINY, 2, "ddp")}, {"config": with_workers(TINY, 2, "fsdp")}])
    print(f"tiny model, {TINY['train']['steps']} steps, global batch {TINY['train']['batch_size']} x "
          f"{TINY['train']['seq_len']} (grad_accum {TINY['train']['grad_accum']} on every worker), gloo, 1 thread "
          "per worker")
    print("| run | final loss | max abs diff of the loss curve vs 1 worker | max rel diff of ppl vs 1 worker | "
          "ms/step |")
    print("|---|---|---|---|---|")
    reference = one["result"]["perplexity"]
    for label, summary in (("1 worker", one), ("2 workers DDP", ddp[0]), ("2 workers FSDP", fsdp[0])):
        result = summary["result"]
        curve = max_abs_difference(one["losses"], summary["losses"])
        ppl = max(abs(result["perplexity"][k] / reference[k] - 1) for k in reference)
        print(f"| {label} | {result['final_train_loss']:.6f} | {curve:.2e} | {ppl:.2e} | {result['ms_per_step']:.1f} |")


def timed_steps(model_cfg: ModelConfig, train_cfg: TrainConfig, regions: list, device: torch.device,
                fsdp: bool) -> tuple[float, int]:
    """ms per step (the trainer's median after warm-up) and peak CUDA memory (0 on CPU) of `train_cfg.steps`
    steps, on the plain model or on the model wrapped in FSDP over a world of one."""
    torch.manual_seed(0)
    model = build_model(model_cfg).to(device)
    precision = resolve_precision(train_cfg.precision, device)
    if fsdp:
        model = shard_model(model, World(0, 1), precision)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    stream = TrainStream(regions, train_cfg.seq_len, seed=0)
    result = train(model, stream, train_cfg, precision=precision, world=World(0, 1))
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    del model
    return result.ms_per_step, peak


def fsdp_overhead_table(model_cfg: ModelConfig, train_cfg: TrainConfig, regions: list, device: torch.device) -> None:
    with tempfile.TemporaryDirectory() as folder:
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, init_method=f"file://{folder}/store", rank=0, world_size=1)
        try:
            plain = timed_steps(model_cfg, train_cfg, regions, device, fsdp=False)
            sharded = timed_steps(model_cfg, train_cfg, regions, device, fsdp=True)
        finally:
            dist.destroy_process_group()
    print(f"\n{model_cfg.preset} {model_cfg.pos_encoding}/{model_cfg.processor}, batch {train_cfg.batch_size} x "
          f"{train_cfg.seq_len}, {train_cfg.steps} steps on {device}, precision {train_cfg.precision}")
    print("| trainer | ms/step | peak memory |")
    print("|---|---|---|")
    for label, (ms, peak) in (("single device", plain), ("FSDP2, world size 1", sharded)):
        memory = f"{peak / 2**30:.2f} GiB" if peak else "- (CPU)"
        print(f"| {label} | {ms:.1f} | {memory} |")
    ratio_memory = f", memory x{sharded[1] / plain[1]:.2f}" if plain[1] else ""
    print(f"FSDP / single device: ms/step x{sharded[0] / plain[0]:.2f}{ratio_memory}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="the CPU version even where a GPU is present")
    parser.add_argument("--steps", type=int, default=30, help="steps of the FSDP-overhead comparison")
    args = parser.parse_args()
    torch.set_num_threads(1 if args.cpu or not torch.cuda.is_available() else torch.get_num_threads())
    on_gpu = torch.cuda.is_available() and not args.cpu
    regions = load_corpus(DataConfig(max_files=None if on_gpu else 60)).stream_regions()
    if on_gpu:
        device = torch.device("cuda", 0)
        model_cfg = ModelConfig(preset="350M", pos_encoding="kerple", processor="dapev2", kernel_size=3, d_dape=32,
                                train_length=512, attention_block_size=64)
        train_cfg = TrainConfig(steps=args.steps, batch_size=8, seq_len=512, precision="bf16", lr=3e-4)
    else:
        equivalence_table()
        device = torch.device("cpu")
        model_cfg = ModelConfig(**TINY["model"], train_length=32)
        train_cfg = TrainConfig(steps=args.steps, batch_size=8, seq_len=32)
    fsdp_overhead_table(model_cfg, train_cfg, regions, device)


if __name__ == "__main__":
    main()

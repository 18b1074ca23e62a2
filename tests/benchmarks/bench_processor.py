"""The score processor's share of a DAPE training step against its share of the step's FLOPs, on one thread
(as in a Ray trial), PyTorch's convolutions (the reference) against dape_core's GEMM path
(dape_core/processors/score_conv.py), measured in the same run, interleaved.

    python tests/benchmarks/bench_processor.py [--kernels 1 3 7] [--reps 15]

The model is the main job's (studies/kernel_size.yaml at its CPU default: preset small, Kerple, D = 32,
batch 16, length 64). Per kernel and path: the training step (forward, loss, backward, AdamW) and the
processor's forward + backward on the step's shapes (scores [B, H, T, T], the layer's bias), times the
layers. Share = processor time / step time; FLOP share = the processor's multiply-adds over the model's,
from dape_core's own per-token count (dape_core/evaluate/flops.py). Goal (issue 45): share within 1.3x of
the FLOP share. Times are CPU time of this thread (`time.thread_time`), medians over interleaved
repetitions, so that a machine shared with other work disturbs both paths alike; the ratios are the figures.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from dape_core import ModelConfig
from dape_core.evaluate.flops import forward_flops_per_token
from dape_core.model import build_model
from dape_core.processors import score_conv


def _timed(fn) -> float:
    start = time.thread_time()
    fn()
    return time.thread_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", type=int, nargs="+", default=[1, 3, 7])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(1)
    batch, length = args.batch, args.length
    rows, speedups = [], []
    for kernel in args.kernels:
        torch.manual_seed(0)
        cfg = ModelConfig(preset="small", pos_encoding="kerple", d_dape=32, processor="dapev2", kernel_size=kernel,
                          train_length=length)
        model = build_model(cfg).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        tokens = torch.randint(0, cfg.vocab_size, (batch, length + 1))
        attention = [block.attn for block in model.blocks]
        positions = torch.arange(length)
        heads = attention[0].n_head
        scores = torch.randn(batch, heads, length, length, requires_grad=True)
        bias = attention[0].pos.bias(positions, positions).detach().requires_grad_()
        grad = torch.randn(batch, heads, length, length)

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            _, loss = model(tokens[:, :-1], tokens[:, 1:])
            loss.backward()
            optimizer.step()

        def processors() -> None:
            for attn in attention:
                attn.processor(scores, bias, positions, positions).backward(grad)

        per_token = forward_flops_per_token(model, length)
        processor_flops = sum(attn.processor_cost.macs * length * 2 for attn in attention)
        flop_share = processor_flops / per_token
        times: dict[str, dict[str, list[float]]] = {path: {"step": [], "proc": []} for path in ("conv2d", "gemm")}
        for rep in range(args.reps + 2):
            for path in ("conv2d", "gemm"):
                if path == "conv2d":
                    with score_conv.convolutions():
                        step_s, proc_s = _timed(step), _timed(processors)
                else:
                    step_s, proc_s = _timed(step), _timed(processors)
                if rep >= 2:  # warm-up
                    times[path]["step"].append(step_s)
                    times[path]["proc"].append(proc_s)
        speedups.append((f"1x{kernel}",
                         statistics.median(g / c for g, c in zip(times["gemm"]["step"], times["conv2d"]["step"])),
                         statistics.median(g / c for g, c in zip(times["gemm"]["proc"], times["conv2d"]["proc"]))))
        for path, measured in times.items():
            step_ms = 1e3 * statistics.median(measured["step"])
            proc_ms = 1e3 * statistics.median(measured["proc"])
            share = proc_ms / step_ms
            rows.append((f"1x{kernel}", path, step_ms, proc_ms, share, flop_share, share / flop_share,
                         3 * processor_flops * batch * length / (proc_ms * 1e6)))
    print(f"one thread, batch {batch}, length {length}; ms are medians of {args.reps} interleaved repetitions")
    print(f"{'kernel':7}{'path':8}{'step ms':>9}{'proc ms':>9}{'share':>7}{'FLOP sh':>8}{'ratio':>7}{'proc GF/s':>10}")
    for kernel, path, step_ms, proc_ms, share, flop_share, ratio, rate in rows:
        print(f"{kernel:7}{path:8}{step_ms:9.1f}{proc_ms:9.1f}{share:7.1%}{flop_share:8.1%}{ratio:7.2f}{rate:10.1f}")
    print("ratio = share / FLOP share (goal: within 1.3)")
    for kernel, step, proc in speedups:
        print(f"{kernel}: gemm / conv2d, median of the repetitions' ratios: step {step:.2f}, processor {proc:.2f}")


if __name__ == "__main__":
    main()

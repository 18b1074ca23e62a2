"""Time the fused attention kernels of one layer for several tile sizes (on a GPU), to choose `tile_choices`'
defaults in dape_core/fused/launch.py.

    python tests/benchmarks/tune_fused_tiles.py --batch 16 --length 512 --kernel 3

Each configuration is `fwd_rows,fwd_cols,bwd_rows,bwd_cols,warps` (as DAPE_FUSED_TILES takes it); for each,
the median time of the forward alone and of forward + backward of one 125M-shaped layer (H = 12, d = 64,
D = 32, Kerple), bfloat16, against the same layer without a processor (PyTorch's fused attention with the
bias): the ratio is the processor's cost at the attention level.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from dape_core import ModelConfig
from dape_core.attention import CausalSelfAttention
from dape_core.encodings.base import build_position_encoding
from dape_core.fused import launch

CONFIGS = ["16,32,16,32,4", "16,32,16,32,8", "16,64,16,64,8", "32,32,16,32,8", "32,64,16,64,8", "16,64,16,32,8"]


def layer(kernel: int | None) -> CausalSelfAttention:
    overrides = {"processor": "none"} if kernel is None else {"processor": "dapev2", "kernel_size": kernel}
    cfg = ModelConfig(preset="125M", pos_encoding="kerple", d_dape=32, **overrides)
    torch.manual_seed(0)
    return CausalSelfAttention(cfg, build_position_encoding(cfg)).cuda()


def timed(fn, reps: int) -> float:
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(module: CausalSelfAttention, batch: int, length: int, reps: int) -> tuple[float, float]:
    q, k, v = (torch.randn(batch, 12, length, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    positions = torch.arange(length, device="cuda")

    def forward():
        with torch.no_grad():
            module.eval().attend(q, k, v, positions)

    def training():
        out = module.train().attend(q, k, v, positions)
        out.sum().backward()

    return timed(forward, reps), timed(training, reps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--kernel", type=int, default=3)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--configs", nargs="*", default=CONFIGS)
    args = parser.parse_args()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        base_fwd, base_train = measure(layer(None), args.batch, args.length, args.reps)
        print(f"Kerple alone: forward {1e3 * base_fwd:.2f} ms, forward + backward {1e3 * base_train:.2f} ms")
        processor_layer = layer(args.kernel)
        processor_layer.fused = True  # tiles that do not launch raise instead of timing the fallback path
        for config in args.configs:
            os.environ[launch.TILES_ENV] = config
            try:
                fwd, train = measure(processor_layer, args.batch, args.length, args.reps)
            except Exception as error:  # noqa: BLE001 - a configuration that does not compile is reported
                print(f"tiles {config}: {type(error).__name__}: {str(error)[:200]}")
                continue
            print(f"tiles {config}: forward {1e3 * fwd:.2f} ms ({fwd / base_fwd:.2f}x), "
                  f"forward + backward {1e3 * train:.2f} ms ({train / base_train:.2f}x)")


if __name__ == "__main__":
    main()

"""What the fused kernels' first-call self-check costs, against a call of the same layer once it is done, in one run.

    python tests/benchmarks/bench_selfcheck.py            # CPU: Triton's interpreter (TRITON_INTERPRET=1), tiny layer
    python tests/benchmarks/bench_selfcheck.py --device cuda   # a GPU: the 125M layer's width, bfloat16 and float32

For each configuration (training or evaluation; dtype; kernel size), a fresh process-wide state: the first call
(which probes the tile sizes, compiling the kernels on a GPU, and runs the self-check), then the median of a few
later calls. Columns: the first call, of which the self-check (the direct path twice on the 64-row slice, and the
comparison), a later call, and the self-check's time as a multiple of a later call's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--device", default="cpu")
parser.add_argument("--reps", type=int, default=3)
parser.add_argument("--length", type=int, default=None, help="T (default: 512 on CUDA, 64 on CPU)")
args = parser.parse_args()
if args.device == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported

import torch  # noqa: E402
from tabulate import tabulate  # noqa: E402

from dape_core import ModelConfig, fused  # noqa: E402
from dape_core.attention import CausalSelfAttention  # noqa: E402
from dape_core.encodings.base import build_position_encoding  # noqa: E402
from dape_core.fused import fit  # noqa: E402


def main() -> None:
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    size = {"n_head": 12, "d_model": 768, "d_dape": 32} if cuda else {"n_head": 3, "d_model": 48, "d_dape": 8}
    length = args.length or (512 if cuda else 64)
    dtypes = [torch.bfloat16, torch.float32] if cuda else [torch.float32]
    rows = []
    for dtype in dtypes:
        for kernel in (3, 5):
            for training in (True, False):
                rows.append(case(device, size, length, dtype, kernel, training))
                print(f"  {rows[-1][:3]} done", file=sys.stderr, flush=True)
    print(f"device {device}{' (Triton interpreter)' if not cuda else ''}, layer {size}, batch 1 x T={length}, "
          f"median of {args.reps} later calls, torch {torch.__version__}, {torch.get_num_threads()} threads\n")
    print(tabulate(rows, floatfmt=".3g", headers=["dtype", "kernel", "phase", "first call s", "self-check ms",
                                                  "later call ms", "self-check / later call"]))


def case(device, size, length, dtype, kernel, training):
    cfg = ModelConfig(preset="tiny", pos_encoding="kerple", processor="dapev2", kernel_size=kernel, **size)
    torch.manual_seed(0)
    layer = CausalSelfAttention(cfg, build_position_encoding(cfg)).to(device).train(training)
    generator = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, cfg.n_head, length, cfg.head_dim, generator=generator).to(device, dtype)
               .requires_grad_(training) for _ in range(3))
    autocast = torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)

    def call():
        with autocast, torch.set_grad_enabled(training):
            out = fused.fused_attention(layer, q, k, v, forced=True)
            if training:
                out.sum().backward()
        if device.type == "cuda":
            torch.cuda.synchronize()

    fit._FITTED.clear()
    fused.start_record()
    call()
    first = next(iter(fused.recorded_fits().values()))
    times = []
    for _ in range(args.reps):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    later = statistics.median(times)
    return [str(dtype).removeprefix("torch."), f"1x{kernel}", "training" if training else "evaluation",
            first.seconds, 1e3 * first.check.seconds, 1e3 * later, first.check.seconds / later]


if __name__ == "__main__":
    main()

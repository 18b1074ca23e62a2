"""What the fused attention kernels need of a GPU, without one: compile them offline for CUDA targets (Triton's
compiler, and ptxas with Triton's options, both in the triton wheel) and print, per kernel and tile size, the
shared memory of one program, its registers and spilled bytes per thread, and whether it fits each target's
shared memory per block (whether it launches there at all), with the launches' options (`launch.compile_options`).
`dape_core.fused.launch.tile_choices` comes from this table.

    python tests/benchmarks/fused_resources.py                       # sm_80, sm_86, sm_90; the default choices
    python tests/benchmarks/fused_resources.py --arch 89 --tiles fwd:16x32 bwd:16x16 --kernel 5 --warps 4

Shapes are those of a 125M layer (12 heads padded to 16, head dim 64, D = 32), bfloat16, Kerple (a bias),
Concat_Residual. Each compile takes seconds to minutes on a CPU (much longer on a busy one).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import time

os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"  # Triton prints ptxas's report (registers, spills) as it compiles
os.environ["TRITON_ALWAYS_COMPILE"] = "1"  # a cached kernel would skip ptxas and its report

import torch  # noqa: E402
import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from dape_core.fused import kernels  # noqa: E402
from dape_core.fused.launch import Spec, compile_options  # noqa: E402

# Shared memory one block may use (opt-in maximum), by compute capability.
SHARED_LIMIT = {70: 98304, 75: 65536, 80: 166912, 86: 101376, 87: 166912, 89: 101376, 90: 232448}
BFLOAT16_TENSORS = {  # the pointer arguments that hold bfloat16 (the others hold float32)
    "q": "bf16", "k": "bf16", "v": "bf16", "d_out": "bf16", "out": "bf16", "d_scores": "bf16", "weights_out": "bf16",
}


def signature(kernel, constants: dict) -> dict:
    pointers = {"q", "k", "v", "table", "w_in_s", "w_in_b", "b_in", "w_out", "b_out", "out", "lse", "d_out", "delta",
                "d_scores", "weights_out", "d_table", "d_w_in_s", "d_w_in_b", "d_b_in", "d_w_out", "d_b_out"}
    types = {}  # every other argument is an int32, but the float `scale`
    for name in kernel.arg_names:
        if name in constants:
            types[name] = "constexpr"
        elif name in pointers:
            types[name] = "*" + BFLOAT16_TENSORS.get(name, "fp32")
        else:
            types[name] = "fp32" if name == "scale" else "i32"
    return types


def compile_one(which: str, rows: int, cols: int, warps: int, width: int, arch: int) -> dict:
    spec = Spec(n_head=12, head_dim=64, channels=32, kernel_width=width, z_mode=0, residual_bias=True, has_bias=True,
                tril=True, causal=True)
    half = width // 2
    constants = dict(spec.constexprs(torch.bfloat16), M=rows, NZ=cols, P=rows * cols)
    if which == "fwd":
        kernel, constants["OWN"] = kernels.dape_forward_kernel, cols - 4 * half
    else:
        kernel, constants["OWN"] = kernels.dape_backward_kernel, cols - 8 * half
        constants["NW"] = triton.next_power_of_2(rows + cols - 1)
    constants = {name: value for name, value in constants.items() if name in kernel.arg_names}
    started = time.perf_counter()
    report = io.StringIO()
    with contextlib.redirect_stdout(report):
        compiled = triton.compile(ASTSource(kernel, signature(kernel, constants), constants),
                                  target=GPUTarget("cuda", arch, 32),
                                  options=compile_options(warps, (arch // 10, arch % 10)))
    seconds = time.perf_counter() - started
    registers = re.search(r"Used (\d+) registers", report.getvalue())
    spills = re.search(r"(\d+) bytes spill stores", report.getvalue())
    return {"shared": compiled.metadata.shared, "registers": registers.group(1) if registers else "?",
            "spills": spills.group(1) if spills else "?", "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", type=int, nargs="+", default=[80, 86, 90], choices=sorted(SHARED_LIMIT))
    parser.add_argument("--tiles", nargs="+", default=["fwd:16x16", "fwd:16x32", "bwd:16x16", "bwd:16x32"],
                        help="kernel:ROWSxCOLS, kernel fwd or bwd")
    parser.add_argument("--kernel", type=int, default=3, help="the processor's kernel width k")
    parser.add_argument("--warps", type=int, default=8)
    args = parser.parse_args()
    print(f"bfloat16, 1x{args.kernel}, 12 heads (16 padded), d 64, D 32, {args.warps} warps; "
          f"triton {triton.__version__}")
    print(f"{'arch':>6} {'kernel':>7} {'tile':>6} {'shared':>9} {'limit':>8} {'launches':>8} {'regs':>5} "
          f"{'spill B':>7} {'compile':>8}")
    for arch in args.arch:
        for item in args.tiles:
            which, size = item.split(":")
            rows, cols = (int(x) for x in size.split("x"))
            result = compile_one(which, rows, cols, args.warps, args.kernel, arch)
            limit = SHARED_LIMIT[arch]
            print(f"sm_{arch:<3} {which:>7} {size:>6} {result['shared'] / 1024:>6.0f} KB {limit / 1024:>5.0f} KB "
                  f"{'yes' if result['shared'] <= limit else 'NO':>8} {result['registers']:>5} {result['spills']:>7} "
                  f"{result['seconds']:>7.0f}s", flush=True)


if __name__ == "__main__":
    main()

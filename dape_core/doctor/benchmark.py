"""A short benchmark of the attention paths on this device: Kerple against DAPE1x3-Kerple (D = 32), a whole
model's training step (AdamW; bfloat16 autocast on a GPU) and its evaluation (no gradients, batch 1, a longer
sequence), on each of dape_core's paths for the processor that applies here: fused (the Triton kernels, CUDA
only: the interpreter is far too slow to time), block (training: `attention_block_size` rows, on CUDA from the
memory budget; evaluation: the automatic block path) and direct (the full T x T maps). Median of a few steps
after warm-ups, in this process, one case after the other; ratios to Kerple from the same run. On a GPU the
125M shape (batch 16 x 512, evaluation at 8192), on CPU a tiny model, so that it ends in seconds.
(tests/benchmarks/bench_attention.py measures the same and more, against the papers' formulation too, with
this module's builder, steps and timing: tests/benchmarks/model_tables.py.)
"""

from __future__ import annotations

import gc
import statistics
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, cast

import torch

VARIANTS = ("Kerple", "DAPE1x3 fused", "DAPE1x3 block", "DAPE1x3 direct")


@dataclass(frozen=True)
class Setting:
    preset: str
    vocab_size: int
    batch: int
    train_length: int
    eval_length: int
    dtype: torch.dtype  # bfloat16: autocast over float32 weights, as the project trains on a GPU
    reps: int
    warmup: int
    block_rows: int  # attention_block_size of the block variant

    def describe(self, device: torch.device) -> str:
        precision = "bfloat16 autocast" if self.dtype == torch.bfloat16 else str(self.dtype).removeprefix("torch.")
        return (f"{self.preset} model (vocab {self.vocab_size}), training step with AdamW at batch {self.batch} x "
                f"{self.train_length}, evaluation at batch 1 x {self.eval_length}, {precision}, on {device}; median "
                f"of {self.reps} after {self.warmup} warm-up(s); memory: "
                + ("peak allocated, weights and AdamW state included" if device.type == "cuda" else "not measured"))


def default_setting(device: torch.device) -> Setting:
    if device.type == "cuda":
        return Setting("125M", 50257, 16, 512, 8192, torch.bfloat16, reps=10, warmup=3, block_rows=64)
    return Setting("tiny", 256, 4, 128, 512, torch.float32, reps=3, warmup=1, block_rows=64)


@dataclass(frozen=True)
class Row:
    phase: str  # training or evaluation
    variant: str
    seconds: float | None = None
    peak_bytes: int | None = None
    note: str = ""  # why there is no figure


def not_applicable(variant: str, device: torch.device) -> str | None:
    """Why `variant` does not run on `device`, or None."""
    if not variant.endswith("fused"):
        return None
    if device.type != "cuda":
        return "the fused kernels run on CUDA (on CPU only in Triton's interpreter, far too slow to time)"
    import dape_core.fused as fused

    return fused.cannot_run(device)


def build(variant: str, setting: Setting, device: torch.device, training: bool) -> torch.nn.Module:
    return build_variant(variant, device, training, preset=setting.preset, vocab_size=setting.vocab_size,
                         block_rows=setting.block_rows, train_length=setting.train_length)


def build_variant(variant: str, device: torch.device, training: bool, *, preset: Any, vocab_size: int,
                  block_rows: int, **fields) -> torch.nn.Module:
    """The model of `variant` (a name of VARIANTS; the same weights for every variant), on its path, in training
    or evaluation mode. `fields`: other ModelConfig fields (train_length)."""
    from dape_core.config import ModelConfig
    from dape_core.model import Block, build_model

    from .exactness import fused_processor

    processor = {"processor": "none"} if variant == "Kerple" else {"processor": fused_processor(), "kernel_size": 3}
    blocks = variant.endswith("block")
    cfg = ModelConfig(preset=preset, vocab_size=vocab_size, pos_encoding="kerple", d_dape=32,
                      attention_block_size=block_rows if blocks and training else None,
                      eval_block_size=None if variant.endswith("direct") else 128, **processor, **fields)
    torch.manual_seed(0)
    model = build_model(cfg).to(device)
    if variant != "Kerple":
        for block in model.blocks:
            cast(Block, block).attn.fused = variant.endswith("fused")
    return model.train(training)


def autocast(dtype: torch.dtype, device: torch.device):
    """bfloat16 or float16: autocast over the float32 weights (how the project trains); float32: nothing."""
    if dtype == torch.float32:
        return nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def warm_up(step, warmup: int, device: torch.device) -> None:
    for _ in range(warmup):
        step()
    sync(device)


def time_steps(step, reps: int, device: torch.device) -> tuple[float, int | None]:
    """(median seconds of `reps` steps, peak CUDA bytes of those steps: None on another device)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        step()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times), torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None


def measure(step, setting: Setting, device: torch.device) -> tuple[float, int | None]:
    """(median seconds of `setting.reps` steps after `setting.warmup`, peak CUDA bytes of the timed steps)."""
    warm_up(step, setting.warmup, device)
    return time_steps(step, setting.reps, device)


def train_step(runner, optimizer: torch.optim.Optimizer, tokens: torch.Tensor, dtype: torch.dtype,
               device: torch.device):
    """One training step of `runner` (the model, or its compiled form) on `tokens` [B, T + 1], as a function."""

    def step():
        optimizer.zero_grad(set_to_none=True)
        with autocast(dtype, device):
            _, loss = runner(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        optimizer.step()

    return step


def eval_step(runner, tokens: torch.Tensor, dtype: torch.dtype, device: torch.device):
    """One forward of `runner` on `tokens` without gradients, as a function."""

    def step():
        with torch.no_grad(), autocast(dtype, device):
            runner(tokens)

    return step


def training_step(variant: str, setting: Setting, device: torch.device):
    model = build(variant, setting, device, training=True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, setting.vocab_size, (setting.batch, setting.train_length + 1), generator=generator)
    return train_step(model, optimizer, tokens.to(device), setting.dtype, device)


def evaluation_step(variant: str, setting: Setting, device: torch.device):
    model = build(variant, setting, device, training=False)
    generator = torch.Generator().manual_seed(2)
    tokens = torch.randint(0, setting.vocab_size, (1, setting.eval_length), generator=generator).to(device)
    return eval_step(model, tokens, setting.dtype, device)


def run(device: torch.device, setting: Setting | None = None, progress=lambda row: None) -> list[Row]:
    """Every (phase, variant): its time and peak, or why it has none (not applicable here, out of memory, an
    error of its path; the other cases still run)."""
    setting = setting or default_setting(device)
    rows = []
    for phase, make in (("training", training_step), ("evaluation", evaluation_step)):
        for variant in VARIANTS:
            reason = not_applicable(variant, device)
            if reason is not None:
                row = Row(phase, variant, note=reason)
            else:
                row = _guarded(phase, variant, lambda: measure(make(variant, setting, device), setting, device))
            rows.append(row)
            progress(row)
    return rows


def _guarded(phase: str, variant: str, case) -> Row:
    figures, note = guarded(case)
    return Row(phase, variant, *figures) if figures is not None else Row(phase, variant, note=note)


def guarded(case, limit: int = 200) -> tuple[Any, str]:
    """(what `case()` returns, "") or (None, why it failed: out of memory, an error of its path, in at most
    `limit` characters), the device's memory freed after: one failing case leaves the others' figures."""
    try:
        return case(), ""
    except torch.OutOfMemoryError:
        return None, "out of memory"
    except Exception as error:  # noqa: BLE001 - reported in the table, the other cases still run
        return None, f"{type(error).__name__}: {error}"[:limit].replace("\n", " ")
    finally:
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def table(rows: list[Row]) -> str:
    """The rows with their ratios to Kerple's figures of the same phase, as text."""
    from tabulate import tabulate

    base = {row.phase: row for row in rows if row.variant == "Kerple"}
    lines = []
    for row in rows:
        kerple = base.get(row.phase)
        time_ratio = row.seconds / kerple.seconds if row.seconds and kerple and kerple.seconds else None
        memory_ratio = (row.peak_bytes / kerple.peak_bytes
                        if row.peak_bytes and kerple and kerple.peak_bytes else None)
        lines.append([row.phase, row.variant, 1e3 * row.seconds if row.seconds else None, time_ratio,
                      row.peak_bytes / 2**20 if row.peak_bytes else None, memory_ratio, row.note])
    return tabulate(lines, floatfmt=("", "", ".1f", ".2f", ".0f", ".2f", ""), missingval="-",
                    headers=["phase", "variant", "ms", "x Kerple", "MiB", "memory x Kerple", "note"])

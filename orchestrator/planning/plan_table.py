"""How `orchestrator plan` shows its rows (plan_view.py): the table, readable in a 100-column terminal, and the
summary lines under it (the total time, the trials that do not fit, the weights kept)."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from ..study import Study
from .plan_view import PlanRow
from .schedule import best_order, makespan


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}min"
    return f"{seconds / 3600:.1f}h"


def weights_size(study: Study, parameters: int) -> str:
    """The size of the model a finished trial keeps in its run's artifacts, or "none"."""
    from dape_core.stored import weights_bytes

    if study.keep_weights == "none":
        return "none"
    size = weights_bytes(parameters)
    return f"{size / 2**30:.2f} GiB" if size >= 2**30 else f"{size / 2**20:.1f} MiB"


def plan_table(study: Study, profile: str | None, rows: list[PlanRow]) -> Table:
    """The plan's table: the trial's label is folded, never cut, and so are the other columns but the identity;
    the workers and fits columns appear only where they say something (a multi-worker trial,
    resources.gpu_memory_gb, weights of different sizes; the legend gives the size every trial keeps where it
    is one)."""
    gpu_memory = study.resources.gpu_memory_gb
    wide = any(row.cost.workers > 1 for row in rows)
    sizes = [weights_size(study, row.cost.parameters) for row in rows]
    weights = len(set(sizes)) > 1
    table = Table(title=f"{study.name}{f' (profile {profile})' if profile else ''}")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("trial", overflow="fold", ratio=1, min_width=12)
    for column in ["id", "params", "GFLOP/\nstep"] + (["workers"] if wide else []) + ["GiB/\nworker"] + (
            ["fits"] if gpu_memory is not None else []) + (["weights"] if weights else []) + [
            "est.\ntime", "basis", "status"]:
        table.add_column(column, no_wrap=column in ("id", "params"), overflow="fold")
    for number, row in enumerate(rows, 1):
        cost = row.cost
        cells = [str(number), escape(row.name), row.trial_id, f"{cost.parameters / 1e6:.2f}M",
                 f"{cost.flops_per_step / 1e9:.1f}"]
        cells += [f"{cost.workers} x {cost.parallelism}" if cost.workers > 1 else "1"] if wide else []
        cells.append(f"{cost.peak_memory_bytes / 2**30:.2f}")
        if gpu_memory is not None:
            cells.append("yes" if cost.peak_memory_bytes <= gpu_memory * 2**30 else "NO")
        cells += [sizes[number - 1]] if weights else []
        cells += [duration(row.seconds + row.eval_seconds)
                  + (f"–{duration(row.seconds_high + row.eval_seconds)}" if row.seconds_high else ""),
                  row.basis, row.status]
        table.add_row(*cells)
    return table


def summary_lines(study: Study, rows: list[PlanRow], slots: int = 0) -> list[str]:
    """The lines under the table: the estimated total time (training and evaluation) and how much of it is
    measured; with `slots` (the trials the private local Ray runs at once), how long the trials still to run take
    there, packed as `run` packs them; the trials that do not fit resources.gpu_memory_gb (where any)."""
    device = f"{study.resources.gpus:g} GPU" if study.resources.gpus else f"{study.resources.cpus:g} CPU"
    training = sum(row.seconds for row in rows)
    evaluation = sum(row.eval_seconds for row in rows)
    total = training + evaluation
    high = sum(row.total for row in rows)
    spread = f"–{duration(high)}" if any(row.seconds_high for row in rows) else ""
    measured = sum(row.basis.startswith("measured") for row in rows)
    estimated = sum(row.basis != "-" for row in rows)  # a row sharing another's trial adds no time
    lines = [(f"Estimated time, one trial at a time on {device} per worker: {duration(total)}{spread} (training "
              f"{duration(training)}, evaluation {duration(evaluation)}; {measured} of {estimated} estimate(s) "
              "measured in the store, the rest analytic).")]
    if slots > 1:
        to_run = [row.total for row in rows if row.status == "to run"]
        span = makespan([to_run[index] for index in best_order(to_run, slots)], slots)
        lines.append(f"On this machine's private local Ray, {slots} trials at a time in the order `run` gives them: "
                     f"about {duration(span)} for the trials still to run (start-up and the report aside).")
    gpu_memory = study.resources.gpu_memory_gb
    too_big = sum(gpu_memory is not None and row.cost.peak_memory_bytes > gpu_memory * 2**30 for row in rows)
    if too_big:
        lines.append(f"{too_big} trial(s) do not fit resources.gpu_memory_gb={gpu_memory:g} per worker: give them "
                     "more workers with parallelism fsdp (distributed.workers, resources.workers), or a smaller "
                     "micro-batch (train.grad_accum), or model.attention_block_size.")
    return lines


def weights_line(study: Study, rows: list[PlanRow]) -> str:
    sizes = {weights_size(study, row.cost.parameters) for row in rows}
    each = f" (every trial here: {sizes.pop()})" if len(sizes) == 1 else ""
    return (f"weights: the size of the model each finished trial keeps in its run's artifacts{each} "
            "(keep_weights: final; float32, 4 bytes per parameter); none with keep_weights: none.")

"""`orchestrator slurm`: write (and submit) a SLURM batch job that runs the study on Ray (orchestrator/slurm/)."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.markup import escape

from .invocation import Invocation, writable
from .output import EXIT_INVALID, console, stop


def slurm(invocation: Invocation, *, reports_dir: Path | None, storage_dir: Path | None, nodes: int,
          gpus_per_node: int | None, cpus_per_node: int | None, partition: str | None, account: str | None,
          time_limit: str | None, sbatch: list[str] | None, setup: list[str] | None, join_timeout: float,
          signal_grace: int, requeue: bool, script: Path | None, submit: bool, dry_run: bool) -> None:
    from ..slurm.job import JobRequest, largest_trial, problems
    from ..slurm.script import JobTarget, render

    study, study_path = invocation.study, invocation.study_path
    largest = largest_trial(study)
    request = JobRequest(nodes, gpus_per_node, cpus_per_node, partition, account, time_limit, list(sbatch or []),
                         list(setup) if setup else None, join_timeout, signal_grace, requeue).complete(largest)
    found = problems(request, largest)
    if found:
        stop("[red]Invalid option[/red]: " + escape("; ".join(found)) + ". Nothing was submitted.", EXIT_INVALID)
    slurm_dir = invocation.folder(None, "slurm").resolve()
    target = JobTarget(study.name, study_path.resolve(), Path.cwd().resolve(), invocation.uri,
                       invocation.reports_folder(reports_dir).resolve(),
                       invocation.folder(storage_dir, ".orchestrator").resolve(), slurm_dir, invocation.profile,
                       invocation.overrides)
    text = render(request, target)
    if dry_run:
        sys.stdout.write(text)
        return
    script = (script or slurm_dir / f"{study.name}.sbatch").resolve()
    for folder, option in ((script.parent, "--script"), (target.logs_dir, "the job's log folder"),
                           (target.reports_dir, "--reports-dir"), (target.storage_dir, "--storage-dir")):
        writable(folder, option)
    if submit:
        from ..slurm.submit import SubmitRefused
        from ..slurm.submit import submit as sbatch_submit

        try:
            job_id = sbatch_submit(text)
        except SubmitRefused as error:  # SLURM's own message; the script is not written
            stop(f"[red]{error.title}[/red] {escape(str(error))}", EXIT_INVALID)
        script.write_text(text)
        console.print(f"Submitted job {job_id} for study {study.name}; log: {target.logs_dir}/{escape('%x-%j')}.out "
                      f"({target.logs_dir / f'orchestrator-{study.name}-{job_id}.out'}); script: {script}")
        console.print(f"Resume after a stop or the time limit: sbatch {script}  (follow it: squeue -j {job_id})")
        return
    script.write_text(text)
    console.print(f"Wrote {script} ({request.nodes} node(s) x {request.gpus_per_node} GPU, {request.cpus_per_node} "
                  f"CPUs). Submit it with: sbatch {script}")

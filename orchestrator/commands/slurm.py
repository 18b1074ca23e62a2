"""`orchestrator slurm`: write (and submit) a SLURM batch job that runs the study on Ray (orchestrator/slurm/)."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.markup import escape

from .invocation import Invocation, writable
from .output import EXIT_INVALID, console, err, stop


def slurm(invocation: Invocation, *, reports_dir: Path | None, storage_dir: Path | None, nodes: int,
          gpus_per_node: int | None, cpus_per_node: int | None, partition: str | None, account: str | None,
          time_limit: str | None, sbatch: list[str] | None, setup: list[str] | None, join_timeout: float,
          signal_grace: int, requeue: bool, script: Path | None, submit: bool, dry_run: bool,
          decide: bool = False, node_cores: int | None = None, run_flags: tuple[str, ...] = ()) -> None:
    """`decide` (--decide), or a study's `decide:` section: the job's `orchestrator run` adds seeds until the
    claims are decided; refused here (exit 2, nothing written) where seeds cannot decide them, and sized for its
    first look. `run_flags`: `run`'s --new-sequence, --retrain-stale, --keep-stale, passed on to the job's run."""
    from ..slurm.cores import node_cores as find_node_cores
    from ..slurm.job import JobRequest, problems
    from ..slurm.script import JobTarget, render
    from ..slurm.sizing import TimeLimitError, size_job

    study, study_path = invocation.study, invocation.study_path
    if {"--retrain-stale", "--keep-stale"} <= set(run_flags):
        stop("[red]Invalid options[/red] --retrain-stale and --keep-stale: the finished trials of other code are "
             "either trained again or kept, not both. Nothing was written.", EXIT_INVALID)
    if "--new-sequence" in run_flags and not decide and study.decide is None:
        stop("[red]Invalid option[/red] --new-sequence: it starts a new sequence of looks of --decide (or of the "
             "study's decide: section); give --decide too. Nothing was written.", EXIT_INVALID)
    sized_study, deciding_lines = _first_look(study, decide, invocation.uri)
    try:  # the defaults (CPUs for the study's concurrency) and what the job will do, said first (on stderr)
        request, largest, sized = size_job(sized_study, JobRequest(nodes, gpus_per_node, cpus_per_node, partition,
                                                                   account, time_limit, list(sbatch or []),
                                                                   list(setup) if setup else None, join_timeout,
                                                                   signal_grace, requeue,
                                                                   find_node_cores(node_cores, partition)),
                                   invocation.uri)
    except TimeLimitError as error:
        stop(f"[red]Invalid option[/red]: {escape(str(error))}. Nothing was submitted.", EXIT_INVALID)
    for line in [*sized.lines, *deciding_lines]:
        err.print(line, markup=False)
    for warning in sized.warnings:
        err.print(f"[yellow]Warning[/yellow]: {escape(warning)}.")
    found = problems(request, largest)
    if found:
        stop("[red]Invalid option[/red]: " + escape("; ".join(found)) + ". Nothing was submitted.", EXIT_INVALID)
    slurm_dir = invocation.folder(None, "slurm").resolve()
    target = JobTarget(study.name, study_path.resolve(), Path.cwd().resolve(), invocation.uri,
                       invocation.reports_folder(reports_dir).resolve(),
                       invocation.folder(storage_dir, ".orchestrator").resolve(), slurm_dir, invocation.profile,
                       invocation.overrides, decide, run_flags)
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


def _first_look(study, decide: bool, tracking_uri: str | None = None):
    """(the study as the job's first look trains it, the lines that say what a sequence of looks adds): the study
    itself and no line where it adds no seeds. The job is sized for the first look (every row at min_seeds);
    a later look adds seeds only to the rows undecided claims read, up to max_seeds."""
    if not decide and study.decide is None:
        return study, []
    from ..decide_loop import with_decide
    from ..trial.trials import distinct, expand

    deciding = with_decide(study, decide)  # UserInputError (exit 2, nothing written) where seeds cannot decide
    # asked for (above), so with_decide gives the study with its decide section
    assert deciding is not None and deciding.decide is not None, "with_decide: the study with its decide section"
    first = deciding.model_copy(update={"seeds": deciding.decide.first_seeds(deciding.seeds)})
    most = len(distinct(expand(deciding.model_copy(update={"seeds": deciding.decide.seed_order(deciding.seeds)}))))
    asked = "--decide" if decide else "the study's decide: section"
    line = (f"Deciding the claims by seeds ({asked}): the "
            f"estimate is the first look, every row at min_seeds {deciding.decide.min_seeds}; later looks add "
            f"{deciding.decide.batch} seed(s) at a time to the rows undecided claims read, up to max_seeds "
            f"{deciding.decide.max_seeds} ({most} trials at most; `orchestrator plan` gives the seeds each claim "
            "is expected to need). A look cut by the time limit resumes when the job is submitted again.")
    return first, [line, _budget_range(deciding, tracking_uri)]


def _budget_range(study, tracking_uri: str | None) -> str:
    """The sequence's first look, expected and ceiling, as `orchestrator plan` gives them (seeds_needed.py)."""
    from ..planning.learned import load_measured
    from ..planning.seeds_needed import SeedRuns, claim_costs, load_seed_runs, range_words
    from ..tracking.uri import store_missing

    runs, measured = SeedRuns(), None  # no store yet: the stated default spread alone
    if tracking_uri and store_missing(tracking_uri) is None:
        runs, measured = load_seed_runs(tracking_uri), load_measured(tracking_uri)
    return "Its trials and device-hours: " + range_words(study, claim_costs(study, runs, measured), measured)

"""`orchestrator` command line: validate, plan, run, evaluate, status, report, ui and schema of study files; doctor;
slurm.

Exit codes: 0 every trial succeeded; 1 some trials failed (the rest completed; `doctor`: a check failed); 2 invalid
study or argument; 3 interrupted and resumable (re-run the same command); 4 a claim of the study's `expect:`
section fails (only with --strict-claims; claims are findings, so without it they never change the code);
130 interrupted by Ctrl-C; 143 stopped by SIGTERM (kill, scancel, a preemption), as cleanly as by Ctrl-C.
Errors are one clear paragraph, never a traceback, unless --debug.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from .commands.invocation import Invocation, locate
from .commands.output import (
    EXIT_CLAIMS_FAILED,
    EXIT_CTRL_C,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_OK,
    EXIT_TRIALS_FAILED,
    console,
    err,
)
from .errors import OrchestratorError

# Argument parsing only: each command's work is its module in commands/, over one Invocation (the study located,
# loaded, its store and folders chosen). Only typer and rich at import: each command imports what it needs (the
# study format loads torch through dape_core, running loads Ray and MLflow), so that `orchestrator --help`
# answers at once.
__all__ = [
    "EXIT_CLAIMS_FAILED",
    "EXIT_CTRL_C",
    "EXIT_INTERRUPTED",
    "EXIT_INVALID",
    "EXIT_OK",
    "EXIT_TRIALS_FAILED",
    "app",
    "console",
    "err",
    "main",
]

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode="markdown",  # a docstring's line breaks are not the help's: paragraphs reflow
                  help="Run DAPE-style ablation studies: study file -> Ray Tune trials -> MLflow -> report.")
StudyArg = Annotated[str, typer.Argument(metavar="STUDY", help="A study file, or a study's name (studies/NAME.yaml).")]
ProfileOpt = Annotated[Optional[str], typer.Option("--profile", "-p", help="A named profile of the study (e.g. "
                                                                           "paper).")]
OverridesArg = Annotated[Optional[list[str]], typer.Argument(metavar="[KEY=VALUE]...", help="Dotted overrides, e.g. "
                                                                                            "train.steps=100.")]
TrackingOpt = Annotated[Optional[str], typer.Option(help="MLflow tracking URI; default: MLFLOW_TRACKING_URI, else "
                                                     "mlruns/mlflow.db in the study's project folder.")]
ReportsDirOpt = Annotated[Optional[Path], typer.Option(help="Where reports are written; default: reports/ in the "
                                                            "study's project folder.")]
StrictClaimsOpt = Annotated[bool, typer.Option("--strict-claims", help="Exit with code 4 if a claim of the study's "
                                               "expect: section fails (inconclusive is not a failure).")]
DecideOpt = Annotated[bool, typer.Option("--decide", help="Add seeds until the claims are decided: every row trains "
                                         "min_seeds, then only the rows undecided claims read get more, a batch "
                                         "at a time (the study's decide: section, else its defaults).")]
NewSequenceOpt = Annotated[bool, typer.Option("--new-sequence", help="With --decide: start a new sequence of looks "
                                              "under a design other than the one the store's sequence ran with "
                                              "(the report says so); without it, another design is refused.")]
RetrainStaleOpt = Annotated[bool, typer.Option("--retrain-stale", help="Train again the finished trials computed "
                                               "by other code than the current (default: refuse to run).")]
KeepStaleOpt = Annotated[bool, typer.Option("--keep-stale", help="Keep the finished trials computed by other code "
                                            "than the current: reused, and marked in the report.")]


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            console.print(f"orchestrator {version('dape-orchestrator')}")
        except PackageNotFoundError:  # a source tree that was never installed
            console.print("orchestrator (version unknown: the dape-orchestrator package is not installed)")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _main(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the package's version and exit.")] = False) -> None:
    """Run DAPE-style ablation studies: study file -> Ray Tune trials -> MLflow -> report."""


@app.command()
def validate(studies: Annotated[list[str], typer.Argument(metavar="STUDY... [KEY=VALUE]...",
                                                          help="Study files (or names) to check, then dotted "
                                                               "overrides applied to each, e.g. train.steps=100.")],
             profile: ProfileOpt = None) -> None:
    """Check study files without running anything: the chosen profile (default: none) with its data, and
    every other profile of the file (their missing data is a note: it is needed only where they run).
    KEY=VALUE overrides apply to every study given, as with `run` and `plan`."""
    from .commands.validate import validate as command

    command(studies, profile)


@app.command()
def run(
    study_path: StudyArg,
    overrides: OverridesArg = None,
    profile: ProfileOpt = None,
    tracking_uri: TrackingOpt = None,
    address: Annotated[Optional[str], typer.Option(help="Ray cluster address; default: RAY_ADDRESS, else a local "
                                                        "Ray.")] = None,
    reports_dir: ReportsDirOpt = None,
    storage_dir: Annotated[Optional[Path], typer.Option(help="Ray Tune state and trial checkpoints; default: "
                                                        ".orchestrator/ in the study's project folder.")] = None,
    local: Annotated[bool, typer.Option("--local", help="Run trials in this process one by one, without Ray "
                                                        "(debugging).")] = False,
    connect_timeout: Annotated[float, typer.Option(min=1, help="Seconds the Ray cluster (--address) and the tracking "
                                                               "server get to answer at start.")] = 30.0,
    resource_wait: Annotated[float, typer.Option(min=0, help="Seconds to wait for an autoscaling cluster to add a node "
                                                             "that can host a trial.")] = 600.0,
    failed_only: Annotated[bool, typer.Option("--failed-only",
                                              help="Rerun only the trials whose last run failed.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
    strict_claims: StrictClaimsOpt = False,
    decide: DecideOpt = False,
    new_sequence: NewSequenceOpt = False,
    retrain_stale: RetrainStaleOpt = False,
    keep_stale: KeepStaleOpt = False,
) -> None:
    """Run every trial of a study that has not finished yet, then write its report."""
    from .commands.running import on_cluster
    from .commands.running import run as command
    from .planning.feasibility import machine_memory

    local_machine = local or not on_cluster(address)  # trials run on this machine: judged by its memory
    invocation = Invocation.load(study_path, profile, overrides, tracking_uri, check_data=not on_cluster(address),
                                 feasible=True, local_memory=machine_memory() if local_machine else None)
    command(invocation, address=address, reports_dir=reports_dir, storage_dir=storage_dir, local=local,
            connect_timeout=connect_timeout, resource_wait=resource_wait, failed_only=failed_only, debug=debug,
            strict_claims=strict_claims, decide=decide, new_sequence=new_sequence, retrain_stale=retrain_stale,
            keep_stale=keep_stale)


@app.command()
def plan(study_path: StudyArg, overrides: OverridesArg = None, profile: ProfileOpt = None,
         tracking_uri: TrackingOpt = None,
         decide: Annotated[bool, typer.Option("--decide", help="Accepted for symmetry with `run --decide`: plan "
                                              "always shows what --decide would train.")] = False,
         explain: Annotated[bool, typer.Option("--explain", help="Print the plan's notes in full (how each "
                                               "estimate is made); default: two lines.")] = False) -> None:
    """Show the expanded trial table with costs and what is already finished; launches nothing. It always
    shows what `run --decide` would train (the claims' expected seeds and their cost)."""
    from .commands.plan import plan as command
    from .planning.feasibility import machine_memory

    if decide:
        console.print("plan always shows what --decide would train (below the table); --decide changes nothing here.")
    command(Invocation.load(study_path, profile, overrides, tracking_uri, check_data=True, data_note=True,
                            feasible=True, local_memory=machine_memory()), explain=explain)


@app.command()
def status(study_path: StudyArg, overrides: OverridesArg = None, profile: ProfileOpt = None,
           tracking_uri: TrackingOpt = None) -> None:
    """Each trial's state in the tracking store: finished, failed (with the reason), running, or to run.
    Give the profile and overrides the study was run with: they make the trials' identities."""
    from .commands.status import status as command

    command(Invocation.load(study_path, profile, overrides, tracking_uri))


@app.command()
def schema(output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to this file instead of "
                                                                                 "stdout.")] = None) -> None:
    """Print the study file's JSON Schema (for editor completion, e.g. yaml-language-server)."""
    from .commands.schema import schema as command

    command(output)


@app.command()
def report(
    study_path: StudyArg,
    overrides: OverridesArg = None,
    profile: ProfileOpt = None,
    tracking_uri: TrackingOpt = None,
    reports_dir: ReportsDirOpt = None,
    value: Annotated[str, typer.Option(help="Which value of each run's metrics the cells show: final, best or "
                                            "step:N.")] = "final",
    full: Annotated[bool, typer.Option("--print",
                                       help="Print the whole report (report.md), not only its summary.")] = False,
    attach: Annotated[bool, typer.Option("--attach", help="Also attach the report (and the claims' "
                                         "verdicts) to the study's parent run in MLflow "
                                         "(`orchestrator run` always does).")] = False,
    strict_claims: StrictClaimsOpt = False,
    new_sequence: Annotated[bool, typer.Option("--new-sequence", help="Judge the claims as a new sequence where "
                                               "the study's decide: section or seeds: differ from the sequence "
                                               "`run --decide` recorded (the report says so; not with --attach); "
                                               "without it, that is refused.")] = False,
) -> None:
    """Build the study's report from the MLflow store: tables, significance, plots (Markdown, HTML, LaTeX, CSV)."""
    from .commands.report import report as command

    command(Invocation.load(study_path, profile, overrides, tracking_uri), reports_dir=reports_dir, value=value,
            full=full, attach=attach, strict_claims=strict_claims, new_sequence=new_sequence)


@app.command()
def diff(
    study_path: StudyArg,
    against: Annotated[str, typer.Option("--against", help="The other version: a code fingerprint or a git ref whose "
                                         "trials are in the store, or another store holding the study.")],
    overrides: OverridesArg = None,
    profile: ProfileOpt = None,
    tracking_uri: TrackingOpt = None,
    reports_dir: ReportsDirOpt = None,
) -> None:
    """Compare the study's results at the current code with another code version: per cell both values, the
    difference with its seed interval, and whether it moved beyond seed noise."""
    from .commands.diff import diff as command

    command(Invocation.load(study_path, profile, overrides, tracking_uri), against=against, reports_dir=reports_dir)


@app.command()
def ui(
    study_path: StudyArg,
    tracking_uri: TrackingOpt = None,
    port: Annotated[int, typer.Option(help="Port of the MLflow UI started for a SQLite store.")] = 5000,
) -> None:
    """Open the study in MLflow's UI: starts `mlflow ui` on a SQLite store, or names the page on a server."""
    from .commands.ui import ui as command

    command(Invocation.load(study_path, tracking_uri=tracking_uri), port)


@app.command()
def evaluate(
    study_path: StudyArg,
    overrides: OverridesArg = None,
    lengths: Annotated[Optional[str], typer.Option("--lengths", help="New evaluation lengths: --lengths 16384 32768 "
                                                   "(or 16384,32768); default: each trial's own.")] = None,
    tail_tokens: Annotated[Optional[int], typer.Option("--tail-tokens", min=1, help="K, the scored last tokens of "
                                                       "each window (another protocol: its metrics are named "
                                                       "ppl_<L>.k<K>.n<N>).")] = None,
    windows: Annotated[Optional[int], typer.Option("--windows", min=1, help="Held-out windows per length.")] = None,
    visualise: Annotated[bool, typer.Option("--visualise", help="Draw the learned position patterns (heat maps) "
                                            "at the longest length.")] = False,
    time_it: Annotated[bool, typer.Option("--time", help="Time every stored model alone, one at a time "
                                          "(training step and forward, median and quartiles).")] = False,
    repeats: Annotated[int, typer.Option("--repeats", min=2, help="Timed repeats with --time.")] = 20,
    again: Annotated[bool, typer.Option("--again", help="Redo what the runs already have (e.g. time again on a "
                                        "quieter machine); the new values are logged as new points.")] = False,
    profile: ProfileOpt = None,
    tracking_uri: TrackingOpt = None,
    address: Annotated[Optional[str], typer.Option(help="Ray cluster address; default: RAY_ADDRESS, else a local "
                                                        "Ray.")] = None,
    reports_dir: ReportsDirOpt = None,
    local: Annotated[bool, typer.Option("--local", help="Evaluate in this process one trial at a time, without "
                                                        "Ray.")] = False,
    verify: Annotated[bool, typer.Option("--verify", help="Only check every kept model file of the study's trials "
                                         "against the SHA-256 its run recorded at save (exit 1 naming each that "
                                         "changed); scores and writes nothing.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
) -> None:
    """Score the study's finished trials again from their kept models (no training): new lengths, another tail
    or window count, heat maps; or time each model alone (--time). Metrics go to the same runs; the report
    is rebuilt. Each model file is checked against the SHA-256 its run recorded at save: one that changed is
    refused, naming the trial and the file, and the others are scored (--verify: check them all, score none)."""
    from .commands.evaluate import evaluate as command
    from .commands.evaluate import evaluation_lengths

    located = locate(study_path)
    if verify:
        from .commands.evaluate import verify as verify_command

        verify_command(Invocation.at(located, profile, overrides or [], tracking_uri))
        return
    chosen_lengths, overrides = evaluation_lengths(lengths, overrides or [])
    command(Invocation.at(located, profile, overrides, tracking_uri, check_data=True), chosen_lengths,
            tail_tokens=tail_tokens, windows=windows, visualise=visualise, time_it=time_it, repeats=repeats,
            again=again, address=address, reports_dir=reports_dir, local=local, debug=debug)


@app.command()
def doctor(
    address: Annotated[Optional[str], typer.Option(help="A Ray cluster to reach (default: RAY_ADDRESS; none: "
                                                        "skipped).")] = None,
    tracking_uri: Annotated[Optional[str], typer.Option(help="An MLflow store to reach (default: MLFLOW_TRACKING_URI; "
                                                             "none: skipped).")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="The checks alone, without the benchmark.")] = False,
    connect_timeout: Annotated[float, typer.Option(min=1, help="Seconds the Ray cluster and the tracking store get to "
                                                               "answer.")] = 10.0,
) -> None:
    """Check this machine: environment, cluster and store reachability, the fused attention kernels' exactness on
    this device, DDP/FSDP on 2+ GPUs, and a short benchmark. Exit code 1 when a check fails."""
    from .commands.doctor import doctor as command

    command(address, tracking_uri, quick, connect_timeout)


@app.command()
def slurm(
    study_path: StudyArg,
    overrides: OverridesArg = None,
    profile: ProfileOpt = None,
    tracking_uri: TrackingOpt = None,
    reports_dir: ReportsDirOpt = None,
    storage_dir: Annotated[Optional[Path], typer.Option(help="Ray Tune state and trial checkpoints, on a file system "
                                                        "every node sees; default: .orchestrator/ in the study's "
                                                        "project folder.")] = None,
    nodes: Annotated[int, typer.Option(min=1, help="Nodes of the job: a Ray head on the first, workers on the "
                                                   "rest.")] = 1,
    gpus_per_node: Annotated[Optional[int], typer.Option(min=0, help="GPUs per node; default: enough for the "
                                                         "study's largest trial.")] = None,
    cpus_per_node: Annotated[Optional[int], typer.Option(min=1, help="CPUs per node; default: the trial workers "
                                                         "the study runs at once (resources.max_concurrent), spread "
                                                         "over the nodes, plus one for the driver, at most a node's "
                                                         "cores.")] = None,
    node_cores: Annotated[Optional[int], typer.Option(min=1, help="CPU cores of a node of the partition, the most "
                                                      "CPUs per node the job asks for; default: sinfo's (the "
                                                      "smallest of the partition's nodes) where sinfo answers, "
                                                      "else 64.")] = None,
    partition: Annotated[Optional[str], typer.Option(help="SLURM partition (sbatch --partition).")] = None,
    account: Annotated[Optional[str], typer.Option(help="SLURM account (sbatch --account).")] = None,
    time_limit: Annotated[Optional[str], typer.Option("--time", help="Time limit, e.g. 1-00:00:00 (sbatch --time); "
                                                      "default: the partition's.")] = None,
    sbatch: Annotated[Optional[list[str]], typer.Option(help="An extra #SBATCH option, e.g. --sbatch=--qos=high "
                                                        "(repeatable).")] = None,
    setup: Annotated[Optional[list[str]], typer.Option(help="A shell line the job runs first to get this project's "
                                                       "Python, e.g. 'module load cuda' (repeatable); default: "
                                                       "activate this Python's venv.")] = None,
    join_timeout: Annotated[float, typer.Option(min=1, help="Seconds every node gets to join Ray before the job "
                                                "stops.")] = 300.0,
    signal_grace: Annotated[int, typer.Option(min=10, help="Seconds before the time limit when the study is asked "
                                              "to stop cleanly.")] = 120,
    requeue: Annotated[bool, typer.Option("--requeue", help="Requeue the job when preempted or stopped by its time "
                                          "limit (it resumes the study).")] = False,
    script: Annotated[Optional[Path], typer.Option("--script", help="Where the job script is written; default: "
                                                   "slurm/STUDY.sbatch in the study's project folder.")] = None,
    submit: Annotated[bool, typer.Option("--submit", help="Submit the job with sbatch (the script is written once "
                                         "SLURM accepted it).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the job script; write and submit nothing.")] = False,
    decide: DecideOpt = False,
    new_sequence: NewSequenceOpt = False,
    retrain_stale: RetrainStaleOpt = False,
    keep_stale: KeepStaleOpt = False,
) -> None:
    """Write (and with --submit, submit) a SLURM batch job that runs the study on Ray across its nodes."""
    from .commands.slurm import slurm as command

    command(Invocation.load(study_path, profile, overrides, tracking_uri, check_data=True, data_note=dry_run),
            reports_dir=reports_dir, storage_dir=storage_dir, nodes=nodes, gpus_per_node=gpus_per_node,
            cpus_per_node=cpus_per_node, partition=partition, account=account, time_limit=time_limit, sbatch=sbatch,
            setup=setup, join_timeout=join_timeout, signal_grace=signal_grace, requeue=requeue, script=script,
            submit=submit, dry_run=dry_run, decide=decide, node_cores=node_cores,
            run_flags=run_flags(new_sequence=new_sequence, retrain_stale=retrain_stale, keep_stale=keep_stale))


def run_flags(**flags: bool) -> tuple[str, ...]:
    """The `run` flags a SLURM job passes on to its `orchestrator run` (--new-sequence, --retrain-stale, ...)."""
    return tuple(f"--{name.replace('_', '-')}" for name, given in flags.items() if given)


from .data_cli import data_app  # noqa: E402  (the `data` sub-commands: prepare, verify)

app.add_typer(data_app, name="data")


class _FlagsWithoutType(typer.core.TyperCommand):
    """Help without a `<bool>` type beside each flag (--help, --local, ...): a flag takes no value."""

    def get_params(self, ctx):
        params = super().get_params(ctx)
        for param in params:
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""
        return params


for _command in app.registered_commands + data_app.registered_commands:
    if _command.cls in (None, typer.core.TyperCommand):
        _command.cls = _FlagsWithoutType


def main() -> None:
    import logging

    logging.getLogger("mlflow").setLevel(logging.WARNING)  # "creating tables" notes would bury the progress
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        app()
    except OrchestratorError as error:  # one paragraph, no traceback; errors.py says what each exit code means
        err.print(f"[red]{error.title}[/red] {escape(str(error))}")
        sys.exit(error.exit_code)


if __name__ == "__main__":
    main()

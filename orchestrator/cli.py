"""`orchestrator` command line: validate, plan, run, evaluate, status, report, ui and schema of study files; doctor; slurm.

Exit codes: 0 every trial succeeded; 1 some trials failed (the rest completed; `doctor`: a check failed); 2 invalid
study or argument; 3 interrupted and resumable (re-run the same command); 4 a claim of the study's `expect:`
section fails (only with --strict-claims; claims are findings, so without it they never change the code);
130 interrupted by Ctrl-C.
Errors are one clear paragraph, never a traceback, unless --debug.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .errors import OrchestratorError, exception_chain

# Only typer and rich at import: each command imports what it needs (the study format loads torch through
# dape_core, running loads Ray and MLflow), so that `orchestrator --help` answers at once.

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  rich_markup_mode="markdown",  # a docstring's line breaks are not the help's: paragraphs reflow
                  help="Run DAPE-style ablation studies: study file -> Ray Tune trials -> MLflow -> report.")
# Wide tables when the output is a file or a CI log, instead of rich's 80-column default.
_WIDTH = None if sys.stdout.isatty() else 160
console = Console(highlight=False, soft_wrap=True, width=_WIDTH)
err = Console(stderr=True, highlight=False, soft_wrap=True, width=_WIDTH)

EXIT_OK, EXIT_TRIALS_FAILED, EXIT_INVALID, EXIT_INTERRUPTED, EXIT_CLAIMS_FAILED, EXIT_CTRL_C = 0, 1, 2, 3, 4, 130

StudyArg = Annotated[str, typer.Argument(metavar="STUDY", help="A study file, or a study's name (studies/NAME.yaml).")]
ProfileOpt = Annotated[Optional[str], typer.Option("--profile", "-p", help="A named profile of the study (e.g. paper).")]
OverridesArg = Annotated[Optional[list[str]], typer.Argument(metavar="[KEY=VALUE]...", help="Dotted overrides, e.g. train.steps=100.")]
TrackingOpt = Annotated[Optional[str], typer.Option(help="MLflow tracking URI; default: MLFLOW_TRACKING_URI, else "
                                                     "mlruns/mlflow.db in the study's project folder.")]
ReportsDirOpt = Annotated[Optional[Path], typer.Option(help="Where reports are written; default: reports/ in the study's "
                                                       "project folder.")]
StrictClaimsOpt = Annotated[bool, typer.Option("--strict-claims", help="Exit with code 4 if a claim of the study's "
                                               "expect: section fails (inconclusive is not a failure).")]
TRACKING_FLAG = "--tracking-uri "  # how StudyNotFound names the option on the command line


def _locate_or_exit(argument: str) -> Path:
    """The study file of a STUDY argument (a path, or a name in studies/): study/locate.py's rule."""
    from .study import StudyError
    from .study.locate import study_file

    try:
        return study_file(argument)
    except StudyError as error:
        err.print(f"[red]Invalid study[/red] {escape(str(error))}")
        raise typer.Exit(EXIT_INVALID)


def _project_path(study_path: Path, given: Path | None, name: str) -> Path:
    """An output folder: the one given, else `name` in the study's project folder (study/locate.py)."""
    from .study.locate import project_folder

    return given if given is not None else project_folder(study_path) / name


def _writable_or_exit(folder: Path, option: str) -> Path:
    """`folder`, created if need be, or exit 2 where it cannot be written: checked before anything runs, not
    after the study's last trial."""
    from .folders import unwritable

    error = unwritable(folder)
    if error is not None:
        err.print(f"[red]Invalid option[/red] {option}: cannot write into {escape(str(folder))} "
                  f"({escape(error.strerror or str(error))}). Nothing was run.")
        raise typer.Exit(EXIT_INVALID)
    return folder


def _load_or_exit(path: Path, profile: str | None = None, overrides: list[str] | None = None, check_data: bool = False):
    """The validated study, or exit 2 with every problem. `check_data` (run, plan, validate): the data files the
    trials would read must exist too."""
    from .study import StudyError, load_study, parse_override

    try:
        parsed = dict(parse_override(text) for text in overrides or [])
    except ValueError as error:
        err.print(f"[red]Invalid argument[/red]: {error}")
        raise typer.Exit(EXIT_INVALID)
    try:
        return load_study(path, profile=profile, overrides=parsed, check_data=check_data)
    except StudyError as error:
        err.print(f"[red]Invalid study[/red] {escape(str(error))}")
        raise typer.Exit(EXIT_INVALID)


@app.command()
def validate(studies: Annotated[list[str], typer.Argument(metavar="STUDY...", help="Study files (or names) to check.")],
             profile: ProfileOpt = None) -> None:
    """Check study files without running anything: the chosen profile (default: none) with its data, and
    every other profile of the file (their missing data is a note: it is needed only where they run)."""
    from .study import StudyError, load_study, profile_data_notes, read_study
    from .study.locate import study_file
    from .trial.trials import distinct, expand

    invalid = 0
    for path in studies:
        try:
            file = study_file(path)
            study = load_study(file, profile=profile, check_data=True)
        except StudyError as error:
            invalid += 1
            err.print(f"[red]Invalid study[/red] {escape(str(error))}")
            continue
        profiles = f"; profiles: {', '.join(study.profiles)}" if study.profiles else ""
        expanded = expand(study)
        rows, trials = len(expanded), len(distinct(expanded))
        shared = f" ({rows} rows: {rows - trials} share another row's trial)" if rows != trials else ""
        console.print(f"{path}: valid, {trials} trial(s){shared}{profiles}")
        for note in profile_data_notes(read_study(file)[0], profile):
            console.print(f"  note: {escape(note)}")
    if invalid:
        raise typer.Exit(EXIT_INVALID)


@app.command()
def run(
    study_path: StudyArg,
    overrides: OverridesArg = None,
    profile: ProfileOpt = None,
    tracking_uri: TrackingOpt = None,
    address: Annotated[Optional[str], typer.Option(help="Ray cluster address; default: RAY_ADDRESS, else a local Ray.")] = None,
    reports_dir: ReportsDirOpt = None,
    storage_dir: Annotated[Optional[Path], typer.Option(help="Ray Tune state and trial checkpoints; default: "
                                                        ".orchestrator/ in the study's project folder.")] = None,
    local: Annotated[bool, typer.Option("--local", help="Run trials in this process one by one, without Ray (debugging).")] = False,
    connect_timeout: Annotated[float, typer.Option(min=1, help="Seconds the Ray cluster (--address) and the tracking server get to answer at start.")] = 30.0,
    resource_wait: Annotated[float, typer.Option(min=0, help="Seconds to wait for an autoscaling cluster to add a node that can host a trial.")] = 600.0,
    failed_only: Annotated[bool, typer.Option("--failed-only", help="Rerun only the trials whose last run failed.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
    strict_claims: StrictClaimsOpt = False,
    decide: Annotated[bool, typer.Option("--decide", help="Add seeds until the claims are decided: every row trains "
                                         "min_seeds, then only the rows undecided claims read get more, a batch "
                                         "at a time (the study's decide: section, else its defaults).")] = False,
) -> None:
    """Run every trial of a study that has not finished yet, then write its report."""
    study_path = _locate_or_exit(study_path)
    # On a cluster (--address, RAY_ADDRESS) the driver's disk may not be the workers': each trial checks its data.
    on_cluster = bool(address or os.environ.get("RAY_ADDRESS"))
    study = _load_or_exit(study_path, profile, overrides, check_data=not on_cluster)
    from .trial.trials import expand

    from .decide_loop import with_decide

    deciding = with_decide(study, decide)  # the sequence's study (decide_loop.py), or None; refused: exit 2
    study = deciding or study
    rows = expand(study)  # once: the run and its report read these
    if local:
        _exit_if_not_local(rows)
    from .tracking.uri import resolve_tracking_uri, ui_command

    uri = resolve_tracking_uri(tracking_uri, study_path)
    reports_dir = _writable_or_exit(_project_path(study_path, reports_dir, "reports"), "--reports-dir")
    storage_dir = _writable_or_exit(_project_path(study_path, storage_dir, ".orchestrator"), "--storage-dir")
    console.print(f"Study [bold]{study.name}[/bold] from {study_path}{f' (profile {profile})' if profile else ''}; tracking at {uri}")
    try:
        from .execution.context import RunContext
        from .run import run_and_report

        context = RunContext.create(study, uri, connect_timeout, rows=rows, storage_dir=storage_dir, address=address,
                                    local=local, failed_only=failed_only, resource_wait=resource_wait,
                                    study_path=study_path)
        if deciding is not None:
            from .decide_loop import decide_and_report

            outcome = decide_and_report(context, reports_dir, say=lambda line: console.print(line, markup=False))
        else:
            outcome = run_and_report(context, reports_dir)
    except OrchestratorError:
        raise  # reported by main() as one paragraph with its exit code
    except KeyboardInterrupt:
        err.print("Interrupted. Finished trials are safe in the tracking store; run the same command to resume.")
        raise typer.Exit(EXIT_CTRL_C)
    except Exception as error:  # one paragraph, not a traceback: what failed, and that the study can resume
        if debug:
            raise
        refused = _refused_value(error)
        if refused:  # the user's input, not an outage: re-running would fail the same way
            err.print(f"[red]The tracking store refused a value of this study[/red]: {escape(refused)}. Change it in "
                      "the study file (or its overrides) and run again. Add --debug for the traceback.")
            raise typer.Exit(EXIT_INVALID)
        err.print(f"[red]The study stopped[/red]: {type(error).__name__}: {_first_line(error)}. "
                  f"Trials that finished are recorded in {uri}; once the cause is fixed, run the same command "
                  "to resume without repeating them. Add --debug for the traceback.")
        raise typer.Exit(EXIT_INTERRUPTED)
    console.print()
    console.print(outcome.report_summary, markup=False)
    console.print(f"Report: {outcome.report_dir / 'report.html'} (also report.md, tables.tex, CSV, plots/; attached "
                  "to the study's parent run in MLflow)")
    console.print(f"{_browse_hint(study_path, tracking_uri)}  (or: {ui_command(uri)})")
    overhead = f"; orchestration overhead {outcome.overhead:.1%}" if outcome.overhead is not None else ""
    console.print(f"Wall time {outcome.wall_seconds:.0f}s; {len(outcome.skipped)} trial(s) reused, "
                  f"{outcome.trials_run} run, {len(outcome.failed)} failed; "
                  f"{outcome.steps_run} training steps{overhead}")
    _claims_line(outcome.claims)
    if outcome.failed:
        raise typer.Exit(EXIT_TRIALS_FAILED)
    _exit_on_failed_claims(outcome.claims, strict_claims)


def _claims_line(claims: list) -> None:
    if claims:
        from .reporting.claims import headline

        console.print("Claims: " + headline(claims)  # verdicts on fewer than 3 seeds counted apart, as untested
                      + " (the report's Claims section; MLflow tags claim.<id> on the study's run)")


def _exit_on_failed_claims(claims: list, strict: bool) -> None:
    """Claims are findings: they change the exit code only when asked to (--strict-claims)."""
    from .reporting.claims import FAILS

    failing = [claim.claim.id for claim in claims if claim.verdict == FAILS]
    if strict and failing:
        err.print(f"--strict-claims: {len(failing)} claim(s) fail: {', '.join(failing)}")
        raise typer.Exit(EXIT_CLAIMS_FAILED)


def _exit_if_not_local(rows: list) -> None:
    from .execution.local import multi_worker_problem

    problem = multi_worker_problem(rows)
    if problem:
        err.print(f"[red]Invalid argument[/red]: {problem}. Nothing was run.")
        raise typer.Exit(EXIT_INVALID)


def _browse_hint(study_path: Path, tracking_uri: str | None) -> str:
    return f"Browse the runs: orchestrator ui {study_path}" + (f" --tracking-uri {tracking_uri}" if tracking_uri else "")


def _refused_value(error: BaseException) -> str | None:
    """MLflow's message where it rejected a value the study gave (a name or a param too long, ...)."""
    from mlflow.exceptions import MlflowException

    for cause in exception_chain(error):
        if isinstance(cause, MlflowException) and cause.error_code == "INVALID_PARAMETER_VALUE":
            return _first_line(cause)
    return None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    if text.startswith("Traceback"):  # Ray wraps errors as a formatted traceback: keep its exception line
        from .errors import last_error_line

        return last_error_line(text)
    lines = text.splitlines()
    return lines[0] if lines else "no message"


@app.command()
def plan(study_path: StudyArg, overrides: OverridesArg = None, profile: ProfileOpt = None,
         tracking_uri: TrackingOpt = None) -> None:
    """Show the expanded trial table with costs and what is already finished; launches nothing."""
    study_path = _locate_or_exit(study_path)
    study = _load_or_exit(study_path, profile, overrides, check_data=True)
    from .planning.plan_view import legend, plan_rows
    from .tracking.uri import resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri, study_path)
    store = _open_store(study, uri)
    finished = store.finished_trial_ids() if store else set()
    steps = _measured_steps(tracking_uri, study_path)
    rows = plan_rows(study, steps, finished)
    console.print(_plan_table(study, profile, rows))
    device = f"{study.resources.gpus:g} GPU" if study.resources.gpus else f"{study.resources.cpus:g} CPU"
    total = sum(row.seconds for row in rows)
    high = sum(row.seconds_high or row.seconds for row in rows)
    spread = f"–{_duration(high)}" if high > total else ""
    measured = sum(row.basis.startswith("measured") for row in rows)
    estimated = sum(row.basis != "-" for row in rows)  # a row sharing another's trial adds no time
    console.print(f"Estimated training time, one trial at a time on {device} per worker: {_duration(total)}{spread} "
                  f"({measured} of {estimated} estimate(s) measured in the store, the rest analytic).")
    _too_big_line(rows, study.resources.gpu_memory_gb)
    for line in legend(study):
        console.print(line)
    from .planning.seeds_needed import SeedRuns, load_seed_runs, plan_lines

    runs = load_seed_runs(uri) if steps is not None else SeedRuns()  # a store: the seed-to-seed spreads
    for line in plan_lines(study, runs, steps):  # the claims' seeds and their cost (run --decide)
        console.print(line, markup=False)
    sizes = {_weights_size(study, row.cost.parameters) for row in rows}
    each = f" (every trial here: {sizes.pop()})" if len(sizes) == 1 else ""
    console.print(f"weights: the size of the model each finished trial keeps in its run's artifacts{each} "
                  "(keep_weights: final; float32, 4 bytes per parameter); none with keep_weights: none.")


def _weights_size(study, parameters: int) -> str:
    from dape_core.stored import weights_bytes

    if study.keep_weights == "none":
        return "none"
    size = weights_bytes(parameters)
    return f"{size / 2**30:.2f} GiB" if size >= 2**30 else f"{size / 2**20:.1f} MiB"


def _plan_table(study, profile: str | None, rows: list) -> Table:
    """The plan's table, readable in a 100-column terminal: the trial's label is folded, never cut, and so are
    the other columns but the identity; the workers and fits columns appear only where they
    say something (a multi-worker trial, resources.gpu_memory_gb, weights of different sizes; the legend gives
    the size every trial keeps where it is one)."""
    gpu_memory = study.resources.gpu_memory_gb
    wide = any(row.cost.workers > 1 for row in rows)
    sizes = [_weights_size(study, row.cost.parameters) for row in rows]
    weights = len(set(sizes)) > 1
    table = Table(title=f"{study.name}{f' (profile {profile})' if profile else ''}")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("trial", overflow="fold", ratio=1, min_width=12)
    for column in ["id", "params", "GFLOP/\nstep"] + (["workers"] if wide else []) + ["GiB/\nworker"] + (
            ["fits"] if gpu_memory is not None else []) + (["weights"] if weights else []) + ["est.\ntime", "basis", "status"]:
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
        cells += [_duration(row.seconds) + (f"–{_duration(row.seconds_high)}" if row.seconds_high else ""),
                  row.basis, row.status]
        table.add_row(*cells)
    return table


def _too_big_line(rows: list, gpu_memory: float | None) -> None:
    too_big = sum(gpu_memory is not None and row.cost.peak_memory_bytes > gpu_memory * 2**30 for row in rows)
    if too_big:
        console.print(f"{too_big} trial(s) do not fit resources.gpu_memory_gb={gpu_memory:g} per worker: give them "
                      "more workers with parallelism fsdp (distributed.workers, resources.workers), or a smaller "
                      "micro-batch (train.grad_accum), or model.attention_block_size.")


def _measured_steps(tracking_uri: str | None, study_path: Path):
    """ms per step of the store's finished runs (any experiment), or None where there is no store yet."""
    from .planning.learned import load_measured
    from .tracking.uri import resolve_tracking_uri, store_missing

    uri = resolve_tracking_uri(tracking_uri, study_path)
    return None if store_missing(uri) is not None else load_measured(uri)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}min"
    return f"{seconds / 3600:.1f}h"


def _open_store(study, uri: str):
    """The study's store for reading, or None where the study has not run yet (nothing is created)."""
    from .tracking.lookup import StudyNotFound
    from .tracking.store import StudyStore

    try:
        return StudyStore.open(uri, study.name)
    except StudyNotFound:
        return None


@app.command()
def status(study_path: StudyArg, overrides: OverridesArg = None, profile: ProfileOpt = None,
           tracking_uri: TrackingOpt = None) -> None:
    """Each trial's state in the tracking store: finished, failed (with the reason), running, or to run.
    Give the profile and overrides the study was run with: they make the trials' identities."""
    study_path = _locate_or_exit(study_path)
    study = _load_or_exit(study_path, profile, overrides)
    from .tracking.uri import resolve_tracking_uri
    from .trial.trials import StoredIdentities, expand

    uri = resolve_tracking_uri(tracking_uri, study_path)
    store = _open_store(study, uri)
    runs = store.latest_runs() if store else {}
    table = Table(title=f"{study.name}: {uri}")
    for column in ("trial", "id", "state", "detail"):
        table.add_column(column)
    counts: dict[str, int] = {}
    rows = expand(study)
    stored = StoredIdentities(rows)
    for trial in rows:
        run = stored.lookup(trial, runs)
        state = run.info.status if run else "TO RUN"
        detail = (run.data.tags.get("error", "") if run else "")[:100]
        counts[state] = counts.get(state, 0) + 1
        table.add_row(trial.run_name, trial.trial_id, state, detail)
    console.print(table)
    console.print(", ".join(f"{count} {state.lower()}" for state, count in counts.items()))


@app.command()
def schema(output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to this file instead of stdout.")] = None) -> None:
    """Print the study file's JSON Schema (for editor completion, e.g. yaml-language-server)."""
    from .study.schema import study_json_schema

    text = json.dumps(study_json_schema(), indent=2)
    if output:
        output.write_text(text + "\n")
        console.print(f"Wrote {output}")
    else:
        sys.stdout.write(text + "\n")


@app.command()
def report(
    study_path: StudyArg,
    overrides: OverridesArg = None,
    profile: ProfileOpt = None,
    tracking_uri: TrackingOpt = None,
    reports_dir: ReportsDirOpt = None,
    value: Annotated[str, typer.Option(help="Which value of each run's metrics the cells show: final, best or step:N.")] = "final",
    full: Annotated[bool, typer.Option("--print", help="Print the whole report (report.md), not only its summary.")] = False,
    attach: Annotated[bool, typer.Option("--attach", help="Also attach the report (and the claims' "
                                         "verdicts) to the study's parent run in MLflow (`orchestrator run` always does).")] = False,
    strict_claims: StrictClaimsOpt = False,
) -> None:
    """Build the study's report from the MLflow store: tables, significance, plots (Markdown, HTML, LaTeX, CSV)."""
    study_path = _locate_or_exit(study_path)
    study = _load_or_exit(study_path, profile, overrides)
    try:
        from .reporting.results import ValueChoice

        choice = ValueChoice.parse(value)
    except ValueError as error:
        err.print(f"[red]Invalid option[/red] --{error}")
        raise typer.Exit(EXIT_INVALID)
    from .reporting import build_report, render_md
    from .tracking.lookup import StudyNotFound
    from .tracking.store import StudyStore
    from .tracking.uri import choose_store

    reports_dir = _writable_or_exit(_project_path(study_path, reports_dir, "reports"), "--reports-dir")
    chosen = choose_store(tracking_uri, study_path)
    try:
        store = StudyStore.open(chosen.uri, study.name, chosen.how)
    except StudyNotFound as error:
        # The study has not run in this store: an argument to change, not an outage.
        err.print(f"[red]No results[/red] {escape(error.describe(TRACKING_FLAG))}")
        raise typer.Exit(EXIT_INVALID)
    built = build_report(study, store, reports_dir, choice, study_path, attach)
    console.print(built.markdown if full else render_md.summary(built.document), markup=False)
    attached = "; attached to the study's parent run in MLflow" if attach and store.parent_run_id else ""
    console.print(f"Report: {built.folder / 'report.html'} (also report.md, tables.tex, CSV, plots/){attached}")
    console.print(_browse_hint(study_path, tracking_uri))
    _claims_line(built.claims)
    _exit_on_failed_claims(built.claims, strict_claims)


@app.command()
def ui(
    study_path: StudyArg,
    tracking_uri: TrackingOpt = None,
    port: Annotated[int, typer.Option(help="Port of the MLflow UI started for a SQLite store.")] = 5000,
) -> None:
    """Open the study in MLflow's UI: starts `mlflow ui` on a SQLite store, or names the page on a server."""
    study_path = _locate_or_exit(study_path)
    study = _load_or_exit(study_path)
    from .tracking import ui as mlflow_ui
    from .tracking.lookup import StudyNotFound
    from .tracking.uri import is_server, resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri, study_path)
    try:
        if is_server(uri):
            console.print(f"Study {study.name}: {mlflow_ui.show_on_server(uri, study.name)}")
            return
        console.print(f"Starting the MLflow UI on {uri} (Ctrl-C stops it)")
        code = mlflow_ui.serve(uri, study.name, port, lambda url: console.print(f"MLflow UI for study {study.name}: {url}"))
    except mlflow_ui.UIError as error:
        err.print(f"[red]Cannot show the UI[/red] {escape(str(error))}")
        raise typer.Exit(EXIT_INTERRUPTED)
    except StudyNotFound as error:
        err.print(f"[red]Cannot show the UI[/red] {escape(error.describe(TRACKING_FLAG))}")
        raise typer.Exit(EXIT_INVALID)
    if code not in (0, -signal.SIGINT, -signal.SIGTERM):
        raise typer.Exit(code if code > 0 else 1)


# --- evaluate: stored trials scored again or timed alone (orchestrator/evaluation/) ---------------------------
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
    address: Annotated[Optional[str], typer.Option(help="Ray cluster address; default: RAY_ADDRESS, else a local Ray.")] = None,
    reports_dir: ReportsDirOpt = None,
    local: Annotated[bool, typer.Option("--local", help="Evaluate in this process one trial at a time, without Ray.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
) -> None:
    """Score the study's finished trials again from their kept models (no training): new lengths, another tail
    or window count, heat maps; or time each model alone (--time). Metrics go to the same runs; the report
    is rebuilt."""
    study_path = _locate_or_exit(study_path)
    chosen_lengths, overrides = _evaluation_lengths(lengths, overrides or [])
    study = _load_or_exit(study_path, profile, overrides, check_data=True)
    from .evaluation.request import EvalRequest
    from .evaluation.runner import evaluate_study
    from .tracking.lookup import StudyNotFound
    from .tracking.uri import choose_store

    reports_dir = _writable_or_exit(_project_path(study_path, reports_dir, "reports"), "--reports-dir")
    chosen = choose_store(tracking_uri, study_path)
    request = EvalRequest(lengths=tuple(chosen_lengths), tail_tokens=tail_tokens, n_windows=windows,
                          visualise=visualise, time=time_it, time_repeats=repeats, again=again)
    console.print(f"Study [bold]{study.name}[/bold] from {study_path}; tracking at {chosen.uri}")
    try:
        outcome = evaluate_study(study, chosen.uri, request, local=local, address=address, reports_dir=reports_dir,
                                 study_path=study_path, say=lambda line: console.print(line, markup=False))
    except StudyNotFound as error:
        err.print(f"[red]Nothing to evaluate[/red]: {escape(error.describe(TRACKING_FLAG))}")
        raise typer.Exit(EXIT_INVALID)
    except OrchestratorError as error:  # refused lengths (2), Ctrl-C (130), an unreachable service (3)
        err.print(f"[red]{error.title}[/red] {escape(str(error))}")
        raise typer.Exit(error.exit_code)
    except KeyboardInterrupt:
        err.print("Interrupted. Evaluated trials are in the tracking store; run the same command for the rest.")
        raise typer.Exit(EXIT_CTRL_C)
    except Exception as error:
        if debug:
            raise
        err.print(f"[red]The evaluation stopped[/red]: {type(error).__name__}: {_first_line(error)}. "
                  "Run the same command to evaluate what is missing. Add --debug for the traceback.")
        raise typer.Exit(EXIT_INTERRUPTED)
    if outcome.report_summary:
        console.print()
        console.print(outcome.report_summary, markup=False)
        console.print(f"Report: {outcome.report_dir / 'report.html'}")
    console.print(f"Wall time {outcome.wall_seconds:.1f}s; {len(outcome.evaluated)} trial(s) evaluated "
                  f"({outcome.task_seconds:.1f}s of evaluation), {len(outcome.skipped)} already done, "
                  f"{len(outcome.without_weights)} without weights, {outcome.not_finished} not finished, "
                  f"{len(outcome.failed)} failed")
    for name, reason in outcome.failed.items():
        err.print(f"[red]{escape(name)}[/red]: {escape(reason)}")
    if outcome.failed:
        raise typer.Exit(EXIT_TRIALS_FAILED)


def _evaluation_lengths(given: str | None, rest: list[str]) -> tuple[list[int], list[str]]:
    """`--lengths 16384 32768`: the option takes the first, the numbers after it arrive as positional arguments."""
    if given is None:
        return [], rest
    words = given.replace(",", " ").split() + [word for word in rest if word.isdigit()]
    overrides = [word for word in rest if not word.isdigit()]
    try:
        values = [int(word) for word in words]
    except ValueError:
        values = []
    if not values or any(value <= 0 for value in values):
        err.print(f"[red]Invalid option[/red] --lengths {escape(given)}: give positive token counts, e.g. "
                  "--lengths 1024 2048. Nothing was evaluated.")
        raise typer.Exit(EXIT_INVALID)
    return sorted(set(values)), overrides


# --- doctor: is this machine fit for a study (orchestrator/doctor/) ----------------------------------------------
@app.command()
def doctor(
    address: Annotated[Optional[str], typer.Option(help="A Ray cluster to reach (default: RAY_ADDRESS; none: skipped).")] = None,
    tracking_uri: Annotated[Optional[str], typer.Option(help="An MLflow store to reach (default: MLFLOW_TRACKING_URI; none: skipped).")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="The checks alone, without the benchmark.")] = False,
    connect_timeout: Annotated[float, typer.Option(min=1, help="Seconds the Ray cluster and the tracking store get to answer.")] = 10.0,
) -> None:
    """Check this machine: environment, cluster and store reachability, the fused attention kernels' exactness on
    this device, DDP/FSDP on 2+ GPUs, and a short benchmark. Exit code 1 when a check fails."""
    from .doctor import run_doctor

    report = run_doctor(address, tracking_uri, quick, connect_timeout, say=lambda line: console.print(line, markup=False),
                        progress=lambda line: err.print(line, markup=False))
    if report.failed:
        raise typer.Exit(EXIT_TRIALS_FAILED)


# --- slurm: a study as a SLURM batch job (orchestrator/slurm/) ---------------------------------------------------
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
    nodes: Annotated[int, typer.Option(min=1, help="Nodes of the job: a Ray head on the first, workers on the rest.")] = 1,
    gpus_per_node: Annotated[Optional[int], typer.Option(min=0, help="GPUs per node; default: enough for the "
                                                         "study's largest trial.")] = None,
    cpus_per_node: Annotated[Optional[int], typer.Option(min=1, help="CPUs per node; default: the largest trial's "
                                                         "workers on a node, plus one for the driver.")] = None,
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
) -> None:
    """Write (and with --submit, submit) a SLURM batch job that runs the study on Ray across its nodes."""
    study_path = _locate_or_exit(study_path)
    study = _load_or_exit(study_path, profile, overrides, check_data=True)
    from .slurm.job import JobRequest, largest_trial, problems
    from .slurm.script import JobTarget, render
    from .tracking.uri import resolve_tracking_uri

    largest = largest_trial(study)
    request = JobRequest(nodes, gpus_per_node, cpus_per_node, partition, account, time_limit, list(sbatch or []),
                         list(setup) if setup else None, join_timeout, signal_grace, requeue).complete(largest)
    found = problems(request, largest)
    if found:
        err.print("[red]Invalid option[/red]: " + escape("; ".join(found)) + ". Nothing was submitted.")
        raise typer.Exit(EXIT_INVALID)
    slurm_dir = _project_path(study_path, None, "slurm").resolve()
    target = JobTarget(study.name, study_path.resolve(), Path.cwd().resolve(), resolve_tracking_uri(tracking_uri, study_path),
                       _project_path(study_path, reports_dir, "reports").resolve(),
                       _project_path(study_path, storage_dir, ".orchestrator").resolve(), slurm_dir, profile,
                       tuple(overrides or ()))
    text = render(request, target)
    if dry_run:
        sys.stdout.write(text)
        return
    script = (script or slurm_dir / f"{study.name}.sbatch").resolve()
    for folder, option in ((script.parent, "--script"), (target.logs_dir, "the job's log folder"),
                           (target.reports_dir, "--reports-dir"), (target.storage_dir, "--storage-dir")):
        _writable_or_exit(folder, option)
    if submit:
        from .slurm.submit import SubmitRefused, submit as sbatch_submit

        try:
            job_id = sbatch_submit(text)
        except SubmitRefused as error:  # SLURM's own message; the script is not written
            err.print(f"[red]{error.title}[/red] {escape(str(error))}")
            raise typer.Exit(EXIT_INVALID)
        script.write_text(text)
        console.print(f"Submitted job {job_id} for study {study.name}; log: {target.logs_dir}/{escape('%x-%j')}.out "
                      f"({target.logs_dir / f'orchestrator-{study.name}-{job_id}.out'}); script: {script}")
        console.print(f"Resume after a stop or the time limit: sbatch {script}  (follow it: squeue -j {job_id})")
        return
    script.write_text(text)
    console.print(f"Wrote {script} ({request.nodes} node(s) x {request.gpus_per_node} GPU, {request.cpus_per_node} "
                  f"CPUs). Submit it with: sbatch {script}")


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

"""The sbatch script of a study's job (job.py says what it asks for). What the script does, in order:

1. `#SBATCH` lines: one task per node with the job's CPUs and GPUs, the log in the logs folder (appended
   to by a requeued job), `--dependency=singleton` (one job of the study at a time: a resubmission waits for
   the one before to end), USR1 `--signal`ed to the batch shell before the time limit.
2. The setup lines (a venv, `module load`), then a fresh Ray token for this job (`RAY_AUTH_MODE=token`; srun
   passes the environment to the other nodes, the token is never written to a file).
3. Ray: the head on the first node (the batch shell's), a worker on every other node through one `srun`,
   each at its SLURM address with the CPUs and GPUs SLURM granted (node.py); then a bounded wait for all
   of them to join. A node that never joins stops the job there, before anything is written.
4. MLflow: a tracking server (`http://...`) or database URI is used as given. A SQLite store (the default,
   `mlruns/mlflow.db`) is served by an `mlflow server` started on the first node with its file where it is:
   SQLite's locks are not reliable on network file systems (NFS, Lustre), so a SQLite file there must have
   exactly one process opening it, the server; the trials' artifacts go straight into the shared folder. The
   server asks for a login made for the job (server.py), which only the driver is given.
5. `orchestrator run` against that Ray and that store. On USR1 (the time limit is near), TERM (scancel,
   preemption) or INT it gets SIGINT, which stops the study cleanly (running trials closed as KILLED, the
   report written); then the workers, the head and the server are stopped and the node-local Ray folder
   removed. With `--requeue`, a job stopped by its time limit requeues itself.
Submitting the same script again resumes: finished trials are skipped, stopped ones continue from their
checkpoints in the storage folder (on the shared file system, so that any node finds them).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from .job import JobRequest


@dataclass(frozen=True)
class JobTarget:
    """What the job runs: the study and where its results go (absolute paths, seen alike by every node)."""

    study_name: str
    study_path: Path
    workdir: Path  # the driver's folder: relative data paths of the study are taken from it
    tracking_uri: str
    reports_dir: Path
    storage_dir: Path
    logs_dir: Path
    profile: str | None = None
    overrides: tuple[str, ...] = ()
    decide: bool = False  # `run --decide` (a study's decide: section is read by `run` anyway)
    run_flags: tuple[str, ...] = ()  # `run`'s other flags given to `orchestrator slurm`: --new-sequence, --keep-stale


def job_name(study_name: str) -> str:
    return f"orchestrator-{study_name}"


def sqlite_file(tracking_uri: str) -> Path | None:
    from ..tracking.uri import sqlite_path

    return sqlite_path(tracking_uri)


def render(request: JobRequest, target: JobTarget) -> str:
    q = shlex.quote
    lines = ["#!/bin/bash",
             f"# Study {target.study_name} as one SLURM job, written by `orchestrator slurm`. Submit it with",
             "# `sbatch THIS_FILE`; submitting it again resumes the study (finished trials are skipped, stopped",
             "# ones continue from their checkpoints). docs/cluster.md, \"On a SLURM cluster\", explains each step.",
             f"#SBATCH --job-name={job_name(target.study_name)}",
             f"#SBATCH --nodes={request.nodes}",
             "#SBATCH --ntasks-per-node=1",
             f"#SBATCH --cpus-per-task={request.cpus_per_node}"]
    if request.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={request.gpus_per_node}")
    for option, value in (("partition", request.partition), ("account", request.account), ("time", request.time)):
        if value:
            lines.append(f"#SBATCH --{option}={value}")
    lines += [f"#SBATCH --output={target.logs_dir}/%x-%j.out",
              "#SBATCH --open-mode=append",
              f"#SBATCH --signal=B:USR1@{request.signal_grace}",
              "#SBATCH --dependency=singleton"]
    if request.requeue:
        lines.append("#SBATCH --requeue")
    lines += [f"#SBATCH {line.strip()}" for line in request.sbatch_lines]
    gpus = f" --gpus-per-node={request.gpus_per_node}" if request.gpus_per_node else ""
    lines += ["", "set -u -m  # -m: each background process in its own process group, SIGINT not ignored", ""]
    lines += request.setup or []
    lines += [f"cd {q(str(target.workdir))} || exit 1",
              "export MLFLOW_DISABLE_TELEMETRY=true RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1",
              "export RAY_AUTH_MODE=token",
              "RAY_AUTH_TOKEN=$(python -c 'import secrets; print(secrets.token_hex(32))') || exit 1",
              "export RAY_AUTH_TOKEN",
              "node() { python -m orchestrator.slurm.node \"$@\"; }",
              "HEAD_IP=$(node address) && RAY_PORT=$(node free-port) || exit 1",
              "RAY_ADDRESS_=\"$HEAD_IP:$RAY_PORT\"",
              "RAY_TMP=/tmp/orchestrator-ray-$SLURM_JOB_ID  # + -NODE: node-local, and short (Ray's socket paths)",
              "HEAD_PID= WORKERS_PID= MLFLOW_PID= RUN_PID= STOP= REQUEUE= JOB_DIR=",
              "",
              _FUNCTIONS,
              "echo \"Job $SLURM_JOB_ID: $SLURM_JOB_NUM_NODES node(s) ($SLURM_JOB_NODELIST); Ray head at "
              "$RAY_ADDRESS_\"",
              "python -m orchestrator.slurm.node ray-start head \"$RAY_PORT\" \"$RAY_TMP\" &  # not through node():"
              " its pid, not a subshell's",
              "HEAD_PID=$!",
              "if [ \"$SLURM_JOB_NUM_NODES\" -gt 1 ]; then  # the step's CPUs and GPUs are given: srun does not "
              "inherit --cpus-per-task",
              "  srun --nodes=$((SLURM_JOB_NUM_NODES - 1)) --ntasks=$((SLURM_JOB_NUM_NODES - 1)) "
              "--ntasks-per-node=1 \\",
              f"    --cpus-per-task={request.cpus_per_node}{gpus} --relative=1 --kill-on-bad-exit=0 "
              "--job-name=ray-workers \\",
              "    python -m orchestrator.slurm.node ray-start worker \"$RAY_ADDRESS_\" \"$RAY_TMP\" &",
              "  WORKERS_PID=$!",
              "fi",
              f"node wait-nodes \"$RAY_ADDRESS_\" \"$SLURM_JOB_NUM_NODES\" {request.join_timeout:g} || finish 1",
              ""]
    database = sqlite_file(target.tracking_uri)
    if database is not None:
        lines += ["# A SQLite store is served from this node by one MLflow server: its only reader and writer. The",
                  "# server asks for a login made for this job (MLflow's basic-auth app), written into $JOB_DIR (mode",
                  "# 0700, files 0600) and handed to the driver through its environment; $JOB_DIR goes with the job.",
                  "MLFLOW_PORT=$(node free-port) || finish 1",
                  f"JOB_DIR={q(str(target.logs_dir))}/job-$SLURM_JOB_ID",
                  f"mkdir -p {q(str(database.parent / 'artifacts'))}",
                  "python -m orchestrator.slurm.node mlflow-server \"$JOB_DIR\" \"$HEAD_IP\" \"$MLFLOW_PORT\" \\",
                  f"  {q(target.tracking_uri)} {q((database.parent / 'artifacts').as_uri())} &"
                  "  # its pid, not a subshell's",
                  "MLFLOW_PID=$!",
                  "TRACKING_URI=\"http://$HEAD_IP:$MLFLOW_PORT\"",
                  "node wait-http \"$TRACKING_URI/health\" 300 || finish 1",
                  ". \"$JOB_DIR/mlflow-credentials\" || finish 1  # MLFLOW_TRACKING_USERNAME / _PASSWORD",
                  "export MLFLOW_TRACKING_USERNAME MLFLOW_TRACKING_PASSWORD"
                  "  # for the driver (Ray's nodes started before)",
                  "echo \"MLflow server for this job: $TRACKING_URI (store: " + str(database)
                  + "; login: $JOB_DIR/mlflow-credentials)\""]
    else:
        lines.append(f"TRACKING_URI={q(target.tracking_uri)}")
    run = ["python", "-m", "orchestrator", "run", q(str(target.study_path)), *map(q, target.overrides)]
    if target.profile:
        run += ["--profile", q(target.profile)]
    run += ["--address", "\"$RAY_ADDRESS_\"", "--tracking-uri", "\"$TRACKING_URI\"",
            "--reports-dir", q(str(target.reports_dir)), "--storage-dir", q(str(target.storage_dir))]
    if target.decide:
        run.append("--decide")
    run += target.run_flags
    lines += ["[ -z \"$STOP\" ] || finish 3",
              " ".join(run) + " &",
              "RUN_PID=$!",
              "wait_for \"$RUN_PID\"; CODE=$?"]
    if request.requeue:  # a job stopped by its time limit goes back into the queue, and resumes there
        lines.append("[ \"$STOP\" = timeout ] && [ \"$CODE\" != 0 ] && REQUEUE=1")
    lines += ["finish \"$CODE\"", ""]
    return "\n".join(lines)


_FUNCTIONS = r"""wait_for() {  # the exit status of background process $1, waiting through the signals trapped below
  local code
  while :; do
    wait "$1"; code=$?
    kill -0 "$1" 2> /dev/null || break
  done
  if [ "$code" -gt 128 ]; then wait "$1" 2> /dev/null; local again=$?; [ "$again" = 127 ] || code=$again; fi
  return "$code"
}
alive() {  # whether process $1 still runs (a child that exited is a zombie until waited for)
  local stat; { read -r stat < "/proc/$1/stat"; } 2> /dev/null || return 1
  stat=${stat##*) }; [ "${stat%% *}" != Z ]
}
alive_any() {
  local pid; for pid in "$@"; do alive "$pid" && return 0; done; return 1
}
stop_group() {  # $1: signal, $2: leader pid of a background process group
  [ -n "$2" ] && kill "-$1" -- "-$2" 2> /dev/null
}
stop_workers() {  # TERM to the workers' tasks (srun itself, given TERM, would kill them at once), by step id
  [ -n "$WORKERS_PID" ] || return 0
  local step; step=$(squeue --steps --jobs "$SLURM_JOB_ID" --noheader --format="%i %j" 2> /dev/null |
    while read -r id name; do [ "$name" = ray-workers ] && echo "$id"; done)
  if [ -n "$step" ]; then scancel --signal=TERM "$step" 2> /dev/null; else stop_group TERM "$WORKERS_PID"; fi
}
finish() {  # stop the workers, the head and the MLflow server, by process id; exit with $1
  trap '' TERM INT USR1
  echo "Stopping Ray and the job's services."
  stop_workers
  stop_group TERM "$HEAD_PID"
  stop_group TERM "$MLFLOW_PID"
  for _ in $(seq 15); do  # 15 s to stop (inside SLURM's KillWait, 30 s by default), then killed
    alive_any $WORKERS_PID $HEAD_PID $MLFLOW_PID || break; sleep 1
  done
  for pid in $WORKERS_PID $HEAD_PID $MLFLOW_PID; do stop_group KILL "$pid"; wait "$pid" 2> /dev/null; done
  [ -n "$JOB_DIR" ] && rm -rf -- "$JOB_DIR"  # the MLflow server's login: it ends with the server
  if [ -n "$REQUEUE" ]; then
    echo "Requeueing job $SLURM_JOB_ID: it resumes the study."; scontrol requeue "$SLURM_JOB_ID"
  fi
  echo "Job $SLURM_JOB_ID ends with exit code $1."
  exit "$1"
}
stop_requested() {  # $1: why; the study stops cleanly and can be resumed by submitting the script again
  STOP=$1
  echo "Stop requested ($1): stopping the study cleanly."
  [ -n "$RUN_PID" ] && kill -INT "$RUN_PID" 2> /dev/null
}
trap 'stop_requested timeout' USR1
trap 'stop_requested "cancelled or preempted"' TERM INT
"""

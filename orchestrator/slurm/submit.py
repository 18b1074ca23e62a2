"""Submit a job script with `sbatch`, reading it from standard input: the script file is written only
once SLURM accepted it, so a refusal (no `sbatch`, a partition or account SLURM rejects) leaves nothing."""

from __future__ import annotations

import shutil
import subprocess

from ..errors import UserInputError


class SubmitRefused(UserInputError):
    title = "Not submitted:"


def submit(script: str, timeout: float = 120.0) -> str:
    """The job id SLURM gave the script; SubmitRefused with SLURM's own message otherwise."""
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise SubmitRefused("`sbatch` is not on the PATH: submit from a SLURM login node (or load its module), or "
                            "write the script without --submit and submit it there with `sbatch FILE`. Nothing was "
                            "submitted.")
    try:
        result = subprocess.run([sbatch, "--parsable"], input=script, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SubmitRefused(f"sbatch did not answer within {timeout:g}s (is slurmctld up?). Check `squeue --me` "
                            "before submitting again.") from None
    if result.returncode != 0:
        message = " ".join((result.stderr or result.stdout).split()) or f"exit code {result.returncode}"
        raise SubmitRefused(f"SLURM refused the job: {message}. Nothing was submitted.")
    return result.stdout.strip().split(";")[0]  # --parsable: "JOBID" or "JOBID;CLUSTER"

"""Run a study as one SLURM batch job: `orchestrator slurm STUDY` writes (`--submit`: submits) the job script.

A generated sbatch script rather than submitit: the job is mostly process plumbing on every node (a Ray head
on the first node, `ray start` on the others through `srun`, an MLflow server, signals, clean stop), which
is shell's job and which submitit leaves to the user; submitit's own strengths (pickling a Python callable,
its checkpoint-and-requeue protocol) are not needed, since a study resumes from its tracking store and its
trials' checkpoints, not from a pickled object. A plain script can be read, printed (`--dry-run`), edited
and resubmitted with `sbatch` by someone who has never seen this tool, and it adds no dependency.

- `job.py`: the job's options, their defaults from the study, and the GPU/CPU sizing check.
- `script.py`: the sbatch script for those options.
- `submit.py`: `sbatch`, and its refusals as one paragraph.
- `node.py`: what the script calls on the nodes (`python -m orchestrator.slurm.node`): a node's address, a
  free port, the bounded wait for every node to join Ray.
"""

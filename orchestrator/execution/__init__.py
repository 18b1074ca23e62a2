"""Running a study's trials (the report is orchestrator/run.py's next step: execution never imports reporting).

- runner.py: `run_study` over a run's context (orchestrator/run_context.py): skip finished trials, run the rest;
- ray_tune.py: Ray start-up, the Tuner, the search algorithm and the scheduler;
- cluster.py: reaching Ray in bounded time, and whether a node can host a trial at all;
- leased.py: only the trials this orchestrator leases run here; the others are waited for;
- interrupt.py: Ctrl-C and SIGTERM stop the Tuner cleanly (exit 130, 143);
- checkpoints.py: a finished trial's checkpoints are removed once its result is recorded, not before;
- tune_callback.py: Ray Tune's trial events, on the driver, into the study's trial events (tracking/events.py);
- tune_trial.py: Ray Tune's function trainable, the entry of each Tune trial on its worker;
- ray_train.py: a multi-worker trial as a Ray Train run inside its Tune trial;
- trainable.py: what each trial runs, without Ray (never MLflow: the driver is the only writer);
- local.py: `--local`, the trials in this process without Ray.

Nothing is imported here: a Ray worker imports tune_trial.py and trainable.py alone, without the driver's MLflow side.
"""

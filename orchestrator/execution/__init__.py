"""Running a study's trials and writing its report.

- runner.py: `run_study`: skip finished trials, run the rest, report;
- ray_tune.py: Ray start-up, the Tuner, the search algorithm and the scheduler;
- tune_callback.py: Ray Tune's trial events, on the driver, into the study's trial events (tracking/events.py);
- trainable.py: what each trial runs on a worker (never MLflow: the driver is the only writer);
- protocol.py: what a trial reports, shared by the worker and the driver;
- local.py: `--local`, the trials in this process without Ray.

Nothing is imported here: a Ray worker imports trainable.py alone, without the driver's MLflow side.
"""

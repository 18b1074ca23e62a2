"""What `orchestrator plan` shows before anything runs: analytic cost estimates (estimate.py), the measured
steps of finished runs (learned.py), the plan's rows (plan_view.py) and the order trials start in
(schedule.py). The trials themselves are the floor below (trial/trials.py).

Nothing is imported here: each command imports the module it needs.
"""

"""How a study's claims are judged: the decision rule of `orchestrator report` and `run --decide` (docs/deciding.md).

Below reporting/ and planning/ (tests/test_layers.py): it reads a results frame and a study, and imports no
renderer, planner or command; they import it.

- claims.py: verdicts on the study's claims (`evaluate_claims`), and why seeds cannot decide one
  (`claim_decidable`);
- decision.py: the sequential paired test at planned looks, its intervals and p-values;
- shrinkage.py: the variance shared across a study's comparisons (`decide.shared_variance`);
- stats.py: seed summaries, Welch/paired tests, Holm's correction, as the report's tables use them too;
- diverged.py: the values no test can use (a diverged or failed evaluation);
- caveats.py: what a check says about the evaluation protocols its sides were measured under;
- design.py: one design per sequence of looks, recorded on the study's run and checked on resume;
- judged.py: each claim as `run --decide`'s loop reads it at a look.

Nothing is imported here: each caller imports the module it needs.
"""

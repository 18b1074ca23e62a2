"""CI runs one full study of the catalogue end to end at CPU scale: studies/leakage.yaml, as shipped."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1000)]  # the study's own run is bounded at 900 s

STUDY = Path(__file__).parents[1] / "studies" / "leakage.yaml"


def test_leakage_study_runs_end_to_end_and_shows_the_leak(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # The shipped file, run from elsewhere: its reports and Ray state would go to the project folder (the
    # repository) by default, so they are sent to this test's folder.
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(STUDY), "--tracking-uri", uri,
                           "--reports-dir", str(tmp_path / "reports"),
                           "--storage-dir", str(tmp_path / ".orchestrator")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("leakage")
    runs = client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'trial'")
    assert len(runs) == 4 and all(run.info.status == "FINISHED" for run in runs)
    by_row = {(run.data.params["model.pos_encoding"], run.data.params["model.leak"]): run for run in runs}
    for encoding in ("alibi", "kerple"):
        causal, leaky = by_row[(encoding, "False")], by_row[(encoding, "True")]
        # Without the tril the model reads the next token: its training loss falls far below the causal one.
        assert leaky.data.metrics["train_loss"] < 0.6 * causal.data.metrics["train_loss"]
    # The study's claims are judged: the collapse is certain at this scale, so its claim holds.
    parent = client.search_runs([experiment.experiment_id], "tags.`orchestrator.role` = 'study'")[0]
    # One seed: it holds on the means, and says it was not tested (no paired test below 2 seeds).
    assert parent.data.tags["claim.leak_collapses_train_loss"] == "holds on 1 seed, untested"
    assert "Claims: 0 of 2 claims decided (0 hold, 0 fail) on 4 trials; 2 on 1 seed, untested (" in proc.stdout
    report = (tmp_path / "reports" / "leakage" / "report.md").read_text()
    assert report.index("## Perplexity") < report.index("## Claims")  # Table 1 first, the claims right after it
    assert "tril off (leak)" in report and "tril on" in report
    assert (tmp_path / "reports" / "leakage" / "report.html").is_file()

"""README's test command is the one CI runs: a fresh machine that follows README gets CI's result."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _setup_commands() -> list[str]:
    setup = ROOT.joinpath("README.md").read_text().split("## Set up", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", setup, flags=re.S)]


def test_readme_test_command_is_ci_run():
    commands = _setup_commands()
    assert len(commands) >= 2, "README's Set up lost its numbered commands"
    assert commands[1] == "bash .ci/run"


def test_ci_run_installs_what_the_suite_needs_then_runs_the_whole_suite():
    script = ROOT.joinpath(".ci", "run").read_text()
    assert "postgresql" in script and "chromium" in script
    assert "missing+=(slurm-wlm)" in script and "missing+=(munge)" in script  # tests/test_slurm.py
    last = [line for line in script.splitlines() if line.strip()][-1]
    assert last.endswith("python -m pytest"), last
    assert "pip install torch==2.13.0 -e '.[test]'" in last

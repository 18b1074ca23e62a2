"""README's set-up commands are the ones CI and the main job use: a fresh machine that follows README gets CI's
result, and the main job README promises is the one it runs."""

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
MAIN_JOB = "orchestrator run studies/kernel_size.yaml"


def _setup_commands() -> list[str]:
    setup = ROOT.joinpath("README.md").read_text().split("## Set up", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", setup, flags=re.S)]


def _ci_last_line() -> str:
    script = ROOT.joinpath(".ci", "run").read_text()
    return [line for line in script.splitlines() if line.strip()][-1]


def test_readme_test_command_is_ci_run():
    commands = _setup_commands()
    assert len(commands) >= 2, "README's Set up lost its numbered commands"
    assert commands[1] == "bash .ci/run"


def test_readme_main_job_installs_as_ci_does_then_runs_the_main_job():
    """Command 1 is CI's install (the same venv, the same torch pin) without the test extras, then the main job."""
    steps = _setup_commands()[0].split(" && ")
    ci = _ci_last_line().split(" && ")
    assert steps[-1] == MAIN_JOB and ROOT.joinpath("studies", "kernel_size.yaml").is_file()
    assert steps[:2] == ci[:2] == ["python3 -m venv .venv", ". .venv/bin/activate"]
    readme_install, ci_install = steps[2], ci[2]
    assert readme_install == "pip install torch==2.13.0 -e ."
    # CI installs the same package with its extras, nothing else: `-e .` there is `-e '.[extras]'`.
    assert re.fullmatch(r"pip install torch==2\.13\.0 -e '\.\[[a-z,]+\]'", ci_install), ci_install


def test_the_first_study_guide_quotes_readme_command():
    guide = ROOT.joinpath("docs", "guides", "first-study.md").read_text()
    assert f"```bash\n{_setup_commands()[0]}\n```" in guide


def test_ci_run_installs_what_the_suite_needs_builds_the_site_then_runs_the_whole_suite():
    script = ROOT.joinpath(".ci", "run").read_text()
    assert "postgresql" in script and "chromium" in script
    assert "missing+=(slurm-wlm)" in script and "missing+=(munge)" in script  # tests/test_slurm.py
    last = _ci_last_line()
    assert last.endswith("python -m pytest"), last
    assert "pip install torch==2.13.0 -e '.[test,docs]'" in last
    # The site is built with warnings as errors before the tests run: a broken link fails CI.
    assert last.index("mkdocs build --strict") < last.index("python -m pytest")
    extras = tomllib.loads(ROOT.joinpath("pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(requirement.startswith("mkdocs-material") for requirement in extras["docs"])

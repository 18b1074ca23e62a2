"""Malformed study files: each names the field, exits 2, and launches nothing (no MLflow store, no run)."""

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator import StudyError, expand, load_study
from orchestrator.cli import app

MALFORMED = sorted((Path(__file__).parent / "malformed").glob("*.yaml"))
STUDIES = sorted((Path(__file__).parents[1] / "studies").glob("*.yaml"))


def _expected_fragment(path: Path) -> str:
    first = path.read_bytes().split(b"\n")[0].decode("utf-8")  # the rest of a file may be anything
    assert first.startswith("# expect: "), f"{path.name} must start with '# expect: <text the error names>'"
    return first.removeprefix("# expect: ")


def test_corpus_is_large_enough():
    assert len(MALFORMED) >= 30


@pytest.fixture
def ray_tripwire(monkeypatch):
    """Records any start of Ray (a refused study must not start one); Ray itself is never started here."""
    import ray

    starts = []
    def refuse(*args, **kwargs):
        starts.append((args, kwargs))
        pytest.fail("Ray started")

    monkeypatch.setattr(ray, "init", refuse)
    return starts


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("path", MALFORMED, ids=lambda p: p.stem)
def test_malformed_study_names_the_field_and_launches_nothing(path, command, tmp_path, monkeypatch, ray_tripwire):
    """`validate` and `run` agree on every file: exit 2 with the field named, before Ray or MLflow."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'store.db'}")
    result = CliRunner().invoke(app, [command, str(path)])
    assert result.exit_code == 2, result.output
    assert _expected_fragment(path) in result.output
    assert "Traceback" not in result.output
    assert not ray_tripwire
    assert not (tmp_path / "store.db").exists() and not (tmp_path / "mlruns").exists()


def test_every_problem_is_reported_at_once(tmp_path):
    study = tmp_path / "many.yaml"
    study.write_text("name: bad\nbase: {model: {kernel_size: 4, d_dape: -1}, train: {steps: 0}}\n")
    with pytest.raises(StudyError) as error:
        load_study(study)
    text = str(error.value)
    for field in ("base.model.kernel_size", "base.model.d_dape", "base.train.steps"):
        assert field in text


def test_real_process_exit_code_is_two(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "run", str(MALFORMED[0])], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "mlruns").exists()


@pytest.mark.parametrize("path", STUDIES, ids=lambda p: p.stem)
def test_shipped_studies_validate_and_plan_in_both_profiles(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    study = load_study(path)
    assert expand(study)
    assert "paper" in study.profiles, "every study has a `paper` profile at the papers' scale"
    paper = load_study(path, profile="paper")
    assert paper.resources.gpus >= 1
    result = CliRunner().invoke(app, ["plan", str(path)])
    assert result.exit_code == 0, result.output
    needed = _data_files(paper)
    if needed:  # here, without the paper's corpus: validate refuses with what to do; plan sizes it and says so
        result = CliRunner().invoke(app, ["validate", str(path), "--profile", "paper"])
        assert result.exit_code == 2 and "orchestrator data prepare CORPUS --output" in result.output
        result = CliRunner().invoke(app, ["plan", str(path), "--profile", "paper"])
        assert result.exit_code == 0 and "to run" in result.stdout
        assert "The data is not prepared" in result.stderr and "orchestrator data prepare CORPUS --output" in \
            result.stderr
        for file in needed:  # stand-ins where the profile reads its corpus (validation reads no data)
            (tmp_path / file).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / file).write_bytes(b"{}")
    result = CliRunner().invoke(app, ["plan", str(path), "--profile", "paper"])
    assert result.exit_code == 0, result.output
    assert "to run" in result.output
    assert not (tmp_path / "mlruns").exists()


def _data_files(study) -> set[str]:
    files = set()
    for trial in expand(study):
        data = trial.config["data"]
        if trial.config["che"] is None and data["source"] != "stdlib":
            files.add(data["path"])
        if trial.config["che"] is None and data["tokenizer"] != "byte":
            files.add(data["tokenizer"])
    return files


def test_kernel_size_study_expands_to_its_five_rows():
    study = load_study(Path(__file__).parents[1] / "studies" / "kernel_size.yaml")
    trials = expand(study)
    assert [t.label for t in trials] == ["Kerple", "DAPE-Kerple", "DAPE1x3-Kerple", "DAPE1x5-Kerple", "DAPE1x7-Kerple"]
    assert [(t.config["model"]["processor"], t.config["model"]["kernel_size"]) for t in trials][1:] == [
        ("dapev2", 1), ("dapev2", 3), ("dapev2", 5), ("dapev2", 7)]
    assert len({t.trial_id for t in trials}) == 5


# Reading the file ------------------------------------------------------------------------------------------

def _bomb(levels: int) -> str:
    """A "billion laughs" study: each level lists the previous one 9 times (9**levels values in all)."""
    lines = ["name: bomb", "l0: &l0 [1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    lines.append(f"axes: {{model.d_dape: [{', '.join([f'*l{levels - 1}'] * 9)}]}}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("levels", [8, 30])
def test_alias_bomb_fails_fast_in_bounded_memory(levels, tmp_path):
    import time
    import tracemalloc

    from orchestrator.study import read_study

    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb(levels))  # 9**9 (or 9**31) values once expanded
    tracemalloc.start()
    started = time.perf_counter()
    with pytest.raises(StudyError, match="more than 20000 nodes"):
        read_study(path)
    seconds = time.perf_counter() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert seconds < 1.0 and peak < 20 * 2**20, (seconds, peak)


def test_duplicate_keys_are_reported_with_the_other_problems(tmp_path):
    study = tmp_path / "s.yaml"
    study.write_text("name: s\nbase:\n  train: {steps: 50000, steps: 5}\n  model: {d_dape: -1}\n"
                     "seeds: [0]\nseeds: [1]\n")
    with pytest.raises(StudyError) as error:
        load_study(study)
    assert error.value.problems == [
        "base.train.steps: the key is given twice (lines 3 and 3); YAML would silently keep only the last value: "
        "give it once",
        "seeds: the key is given twice (lines 5 and 6); YAML would silently keep only the last value: give it once",
        "base.model.d_dape: Input should be greater than or equal to 1"]


def test_a_folder_is_not_a_study_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "studies").mkdir()
    (tmp_path / "studies" / "kernel_size.yaml").write_text("name: s\n")
    for command in ("validate", "run"):
        result = CliRunner().invoke(app, [command, "studies"])
        assert result.exit_code == 2
        assert "studies is a folder, not a study file; name a YAML file (it holds kernel_size.yaml)" in result.output
    assert not (tmp_path / "mlruns").exists()


def test_a_symlink_loop_a_fifo_and_a_broken_link_are_named_for_what_they_are(tmp_path, monkeypatch):
    """Not "no such study file", and not two tracebacks (Path.resolve raises on a loop): one line, exit 2."""
    import os

    monkeypatch.chdir(tmp_path)
    (tmp_path / "loop1.yaml").symlink_to("loop2.yaml")
    (tmp_path / "loop2.yaml").symlink_to("loop1.yaml")
    (tmp_path / "broken.yaml").symlink_to("gone.yaml")
    os.mkfifo(tmp_path / "pipe.yaml")  # a reader would block on it: it must never be opened
    expected = {"loop1.yaml": "loop1.yaml is a symlink loop (its links lead back to themselves, never to a file)",
                "pipe.yaml": "pipe.yaml is a named pipe (FIFO), not a regular file",
                "broken.yaml": "broken.yaml is a broken symlink (it points at gone.yaml, which does not exist)"}
    for name, words in expected.items():
        for command in ("validate", "plan", "run"):
            result = CliRunner().invoke(app, [command, name])
            assert result.exit_code == 2, (command, result.output)
            text = " ".join(result.output.split())
            assert words in text and "no such study file" not in text, (command, text)
            assert "Traceback" not in result.output
            assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert not (tmp_path / "mlruns").exists()


def test_a_huge_study_file_is_refused_by_its_size_before_it_is_read(tmp_path, monkeypatch):
    """The size is checked first (stat): a 256 MB file is refused in bounded memory, not read whole."""
    import tracemalloc

    monkeypatch.chdir(tmp_path)
    huge = tmp_path / "huge.yaml"
    with huge.open("wb") as handle:
        handle.truncate(256 * 2**20)  # sparse: no disk used, but reading it would allocate all of it
    tracemalloc.start()
    result = CliRunner().invoke(app, ["validate", str(huge)])
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert result.exit_code == 2, result.output
    assert "268,435,456 bytes, more than the 1,048,576 a study file may hold" in " ".join(result.output.split())
    assert peak < 64 * 2**20, peak


def test_an_override_that_is_not_yaml_is_one_clear_paragraph(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text("name: s\n")
    for command in ("run", "plan"):
        result = CliRunner().invoke(app, [command, "s.yaml", "data.pattern=*"])
        assert result.exit_code == 2, result.output
        assert "override 'data.pattern=*': the value '*' is not valid YAML" in result.output
        assert "quote it to give it as text" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "mlruns").exists()


# Profiles and data -----------------------------------------------------------------------------------------

TWO_PROFILES = """name: s
base: {model: {preset: tiny}, train: {steps: 5, seq_len: 32}, eval: {lengths: [32], tail_tokens: 16}}
profiles:
  corpus: {base.data: {source: text, path: corpus}}
  broken: {base.train.lr: .nan}
"""


def test_validate_checks_every_profile_and_names_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(TWO_PROFILES)
    result = CliRunner().invoke(app, ["validate", "s.yaml"])
    assert result.exit_code == 2
    assert "profiles.broken: base.train.lr: Input should be a finite number" in result.output
    result = CliRunner().invoke(app, ["validate", "s.yaml", "--profile", "corpus"])
    assert result.exit_code == 2
    assert "s.yaml (profile corpus): 2 problem(s)" in result.output
    assert f"base.data.path: corpus (relative to {tmp_path}) does not exist" in result.output


def test_missing_data_of_a_profile_not_run_is_a_note(tmp_path, monkeypatch):
    """Relative data paths are read from the folder the command runs in; a profile's data is needed only
    where that profile runs."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(TWO_PROFILES.replace("  broken: {base.train.lr: .nan}\n", ""))
    result = CliRunner().invoke(app, ["validate", "s.yaml"])
    assert result.exit_code == 0, result.output
    assert "note: profiles.corpus: base.data.path: corpus (relative to" in result.output
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("")
    result = CliRunner().invoke(app, ["validate", "s.yaml", "--profile", "corpus"])
    assert result.exit_code == 2 and "every file matched in corpus" in result.output
    result = CliRunner().invoke(app, ["plan", "s.yaml", "--profile", "corpus"])  # sizes it, saying what is missing
    assert result.exit_code == 0 and "The data is not prepared: base.data.path: every file matched in corpus" in \
        " ".join(result.stderr.split())
    (tmp_path / "corpus" / "b.txt").write_text("some text " * 100)
    for command in ("validate", "plan"):
        result = CliRunner().invoke(app, [command, "s.yaml", "--profile", "corpus"])
        assert result.exit_code == 0, result.output
        assert "note:" not in result.output
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "s.yaml"), "--profile", "corpus"])
    assert result.exit_code == 2 and f"relative to {elsewhere}" in result.output

"""A study's plugins (dape_core/plugins.py): the example plugin (examples/kq_conv.py) runs through validate,
plan, run, report and evaluate with nothing in dape_core/ or orchestrator/ written for it; a plugin that does
not import, takes a name, misses a part of the API, registers nothing or leaks the future is refused before
anything launches, naming the plugin and the problem (exit 2); one that loads on the driver but not on a Ray
worker is refused before the first trial."""

import shutil
import sqlite3
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from cli_support import run_cli
from registry_support import restored_registry

from dape_core import components, plugins
from dape_core.plugins import PluginError, load_shipped

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "kq_conv.py"


@pytest.fixture(autouse=True)
def registry_restored(tmp_path_factory):
    """Each test's plugins leave the registry, the loaded plugins and sys.modules as they were."""
    with restored_registry(tmp_path_factory):
        yield


def _study(folder: Path, plugin_text: str | None, *, name="plugin.py", processor="planted", extra=None) -> Path:
    if plugin_text is not None:
        (folder / name).write_text(textwrap.dedent(plugin_text))
    spec = {"name": "plugged", "plugins": [name],
            "base": {"model": {"preset": "tiny", "pos_encoding": "kerple", "processor": processor, "d_dape": 8},
                     "data": {"source": "stdlib", "max_files": 40},
                     "train": {"seq_len": 32, "batch_size": 4, "steps": 4, "device": "cpu"},
                     "eval": {"lengths": [32], "tokens_per_length": 1024}},
            **(extra or {})}
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


CONV = """
    import torch
    from torch.nn import functional as F
    from dape_core.components import Cost, Processor, register_processor
    from dape_core.processors.base import ScoreProcessor

    class Shift(ScoreProcessor):
        '''A = S + B + w * S shifted by `shift` keys: key j reads key j - shift (negative: a later key).'''
        def __init__(self, shift):
            super().__init__()
            self.shift = shift
            self.weight = torch.nn.Parameter(torch.ones(()))
        def forward(self, scores, bias, q_pos, k_pos):
            s = self.shift
            moved = F.pad(scores, (s, 0))[..., :-s] if s > 0 else F.pad(scores, (0, -s))[..., -s:]
            return scores + bias + self.weight * moved

    register_processor(Processor({name!r}, "shift", lambda cfg, has_bias: Shift({shift}), cost=lambda cfg: Cost(1, 1)))
"""


@pytest.mark.parametrize("text,problem", [
    ("import no_such_lab_module\n", (r"'plugin.py' does not import: ModuleNotFoundError: No module named "
                                     r"'no_such_lab_module'")),
    ("def broken(:\n", r"'plugin.py' does not import: SyntaxError"),
    (CONV.format(name="dape", shift=1), (r"'plugin.py' is refused: score processor 'dape' is already registered "
                                         r"\(built-in\)")),
    (("from dape_core.components import Processor, register_processor\n"
      "register_processor(Processor('planted', 'x', lambda cfg, has_bias: None))\n"),
     r"'plugin.py' is refused: processor 'planted' misses its cost"),
    ("x = 1\n", r"'plugin.py' registers no component"),
])
def test_a_faulty_plugin_is_refused_naming_it_and_the_problem(tmp_path, capsys, text, problem):
    code, output = run_cli(capsys, "validate", _study(tmp_path, text))
    assert code == 2, output
    assert __import__("re").search(r"plugins\[0\]: " + problem, output), output
    assert "planted" not in components.processors.names()  # nothing it registered stays


def test_a_plugin_that_leaks_the_future_is_refused_with_the_position(tmp_path, capsys):
    """A processor that reads the next key (a roll towards later keys) leaks; the same processor reading
    the previous key does not, and validates."""
    study = _study(tmp_path, CONV.format(name="planted", shift=-1))
    code, output = run_cli(capsys, "run", study, "--local", "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db")
    assert code == 2, output
    flat = " ".join(output.split())  # the console wraps long lines
    found = __import__("re").search(r"base: processor 'planted' \(plugin\) fails the causality check: training, "
                                    r"direct: the gradient of the logits at positions 0\.\.(\d+) with respect to the "
                                    r"embedding at the later position (\d+)", flat)
    assert found and int(found[2]) > int(found[1]), flat
    assert "also on: training, blocks of 10 rows, evaluation, direct, evaluation, blocks of 16 rows" in flat, flat
    assert not (tmp_path / "mlflow.db").exists() or not sqlite3.connect(tmp_path / "mlflow.db").execute(
        "select count(*) from sqlite_master where name='runs'").fetchone()[0]  # nothing launched
    causal = tmp_path / "causal"
    causal.mkdir()
    code, output = run_cli(capsys, "validate", _study(causal, CONV.format(name="planted_past", shift=1),
                                                      processor="planted_past"))
    assert code == 0, output


def test_a_plugin_named_as_a_module_and_its_source_checked_on_a_worker(tmp_path, capsys, monkeypatch):
    """A module plugin is imported by name; a worker whose module differs from the driver's refuses it."""
    package = tmp_path / "lab"
    package.mkdir()
    (package / "lab_conv.py").write_text(textwrap.dedent(CONV.format(name="lab_conv", shift=1)))
    monkeypatch.syspath_prepend(str(package))
    code, output = run_cli(capsys, "validate", _study(tmp_path, None, name="lab_conv", processor="lab_conv"))
    assert code == 0, output
    shipped = plugins._LOADED["lab_conv"].payload()
    assert shipped["kind"] == "module" and shipped["source"] == ""  # imported by name where trials run
    load_shipped([shipped])  # the same module: nothing to do
    with pytest.raises(PluginError, match="'lab_conv': the module imported here .* is not the driver's"):
        load_shipped([{**shipped, "sha256": "0" * 64}])
    code, output = run_cli(capsys, "validate", _study(tmp_path, None, name="absent_lab", processor="lab_conv"))
    assert code == 2 and "plugins[0]: 'absent_lab' does not import: no module of that name" in output


def test_a_file_plugin_travels_with_its_source(tmp_path):
    """What a trial's process gets is the source itself: loading it there needs no file."""
    (tmp_path / "travelling.py").write_text(textwrap.dedent(CONV.format(name="travelling", shift=1)))
    plugin = plugins.load("travelling.py", tmp_path)
    payload = plugin.payload()
    (tmp_path / "travelling.py").unlink()
    components.forget("travelling")
    plugins._LOADED.clear()
    sys.modules.pop("travelling", None)
    load_shipped([payload])
    assert components.processors.get("travelling").owner == "travelling"
    assert plugins.plugin_tags([payload]) == {"plugin.travelling": plugin.sha256}


def test_nothing_in_the_product_names_the_example_plugin():
    for folder in ("dape_core", "orchestrator"):
        for path in (ROOT / folder).rglob("*.py"):
            assert "kq_conv" not in path.read_text(), path


def _copy_example(folder: Path) -> Path:
    shutil.copy(EXAMPLE, folder / "kq_conv.py")
    shutil.copy(EXAMPLE.with_suffix(".yaml"), folder / "kq_conv.yaml")
    return folder / "kq_conv.yaml"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_example_plugin_through_every_command(tmp_path, capsys):
    """validate, plan (the plugin's cost counted), run --local, report (its words), evaluate; every trial run
    tagged with the plugin's source hash."""
    from dape_core import ExperimentConfig
    from orchestrator.planning.estimate import forward_flops_per_sequence

    study = _copy_example(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    code, output = run_cli(capsys, "validate", study)
    assert code == 0 and "valid, 3 trial(s)" in output, output
    code, output = run_cli(capsys, "plan", study, "--tracking-uri", uri)
    assert code == 0 and "KQconv2x3-Kerple" in output, output
    plugged = ExperimentConfig(model={"preset": "tiny", "processor": "kq_conv", "options": {"kq_cols": 5}}).model
    plain = ExperimentConfig(model={"preset": "tiny", "processor": "none"}).model
    extra = forward_flops_per_sequence(plugged, 32, 0) - forward_flops_per_sequence(plain, 32, 0)
    assert extra == plugged.n_layer * 2 * (plugged.n_head * 2 * 5) * 32**2  # its record's cost per entry
    common = ["--tracking-uri", uri, "--reports-dir", tmp_path / "reports"]
    code, output = run_cli(capsys, "run", study, "--local", "--storage-dir", tmp_path / "state", *common)
    assert code == 0 and "3 finished" in output, output
    report = (tmp_path / "reports" / "example_kq_conv" / "report.md").read_text()
    assert "KQ conv" in report  # the processor's label from its record
    code, output = run_cli(capsys, "evaluate", study, "--lengths", "128", "--local", *common)
    assert code == 0 and "3 trial(s) evaluated" in output, output
    from orchestrator.tracking.store import ROLE_TAG

    with sqlite3.connect(tmp_path / "mlflow.db") as db:  # every trial run names the plugin's code
        untagged = db.execute("select count(*) from tags role where role.key = ? and role.value = 'trial' and not "
                              "exists (select 1 from tags plugin where plugin.run_uuid = role.run_uuid and "
                              "plugin.key = 'plugin.kq_conv' and plugin.value = ?)",
                              (ROLE_TAG, plugins._LOADED["kq_conv"].sha256)).fetchone()[0]
        trials = db.execute("select count(*) from tags where key = ? and value = 'trial'", (ROLE_TAG,)).fetchone()[0]
    assert trials == 3 and untagged == 0


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_on_ray_the_plugin_travels_and_one_missing_on_the_workers_is_refused(local_ray, tmp_path, capsys, monkeypatch):
    """A real Ray run: a file plugin whose own import exists only on the driver's path is refused before any
    trial; the example plugin's trial runs on a Ray worker from the source the driver sent."""
    helpers = tmp_path / "driver_only"
    helpers.mkdir()
    (helpers / "driver_only_helper.py").write_text("SHIFT = 1\n")
    monkeypatch.syspath_prepend(str(helpers))  # the driver's sys.path, not the workers'
    plugin = "import driver_only_helper\n" + textwrap.dedent(CONV.format(name="planted", shift=1))
    state, uri = tmp_path / "state", f"sqlite:///{tmp_path}/mlflow.db"
    code, output = run_cli(capsys, "run", _study(tmp_path, plugin), "--tracking-uri", uri, "--storage-dir", state,
                           "--reports-dir", tmp_path / "reports")
    assert code == 2, output
    assert "load here but not on a worker" in output and "driver_only_helper" in output, output
    assert "No trial was run" in output
    example = tmp_path / "example"
    example.mkdir()
    study = _copy_example(example)
    spec = yaml.safe_load(study.read_text())
    spec["variants"] = spec["variants"][2:]  # the plugin's row alone
    spec["variants"][0]["baseline"] = True
    study.write_text(yaml.safe_dump(spec))
    code, output = run_cli(capsys, "run", study, "--tracking-uri", f"sqlite:///{example}/mlflow.db",
                           "--storage-dir", example / "state", "--reports-dir", example / "reports")
    assert code == 0 and "1 finished" in output, output

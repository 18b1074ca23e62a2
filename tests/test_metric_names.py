"""The metric names' one home (dape_core/metric_names.py) agrees with what a result logs: a study is checked against
these names before any trial runs, so a name the result gains or loses must change there too."""

import ast
from pathlib import Path

import pytest

from dape_core import metric_names as names
from dape_core.experiment import ExperimentResult


def _result(**fields) -> ExperimentResult:
    common = dict(final_train_loss=2.5, train_seconds=3.0, eval_seconds=1.0, tokens_seen=100, num_parameters=10,
                  data_hash="h")
    return ExperimentResult(**{**common, **fields})


@pytest.mark.parametrize("timed", [False, True])
def test_an_lm_result_has_the_names_its_shape_gives(timed):
    lengths = {64: 3.0, 256: 4.0}
    result = _result(perplexity=lengths, delta_p=lengths, ms_forward=lengths if timed else {}, ms_per_step=5.0)
    assert set(result.metrics()) == names.result_names(lengths=[64, 256], timed=timed)
    untimed = _result(perplexity=lengths, delta_p=lengths, weights=["model.safetensors"])
    assert set(untimed.metrics()) == names.result_names(lengths=[64, 256], timed_steps=False, weights=True)


def test_a_che_result_has_the_names_its_shape_gives():
    result = _result(perplexity={}, che_acc_train=0.9, che_acc_test=0.5, che_accuracy={40: 0.6, 100: 0.4},
                     ms_per_step=5.0)
    assert set(result.metrics()) == names.result_names(che_test_lengths=[40, 100])
    assert names.by_length(result.metrics(), names.ACC) == {40: 0.6, 100: 0.4}


def test_per_length_names_are_built_and_parsed_by_one_rule():
    assert names.per_length(names.PPL, 512) == "ppl_512"
    assert names.length_of("ppl_512", names.PPL) == 512
    assert names.length_of("ppl_512.k32.n64", names.PPL) is None  # another protocol's: not this family
    assert names.length_of("delta_p_512", names.PPL) is None
    assert names.per_length_pattern(names.MS_FORWARD).match("ms_forward_128").group(1) == "128"
    assert set(names.SERIES.values()) == {names.PPL, names.DELTA_P, names.ACC}


# --- no metric name spelt outside its home ---------------------------------------------------------------------
ROOT = Path(__file__).resolve().parent.parent
HOME = ROOT / "dape_core" / "metric_names.py"

# String constants that spell a registry name on purpose, (file, literal) -> why it is not the registry's.
ALLOWED = {
    ("dape_core/train/loop.py", "lr"): "torch's optimizer param-group key, not the metric",
    ("dape_core/train/loop.py", "tokens_seen"): "a checkpoint's key: a saved file's format must not follow a rename",
    ("dape_core/train/loop.py", "train_seconds"): "a checkpoint's key (as tokens_seen)",
    ("dape_core/train/loop.py", "ms_per_step"): "a checkpoint's key (as tokens_seen)",
    ("dape_core/experiment.py", "eval_seconds"): "ExperimentResult's field names (keyword arguments), not metrics",
    ("dape_core/experiment.py", "ms_forward"): "ExperimentResult's field names (keyword arguments), not metrics",
    ("dape_core/doctor/distributed.py", "lr"): "TrainConfig's field train.lr, the doctor's training settings",
    ("orchestrator/reporting/names.py", "lr"): "the label of the config key train.lr, which a study sweeps",
}


def registry() -> tuple[set[str], tuple[str, ...]]:
    """(the metric names, the prefixes) that dape_core/metric_names.py defines, read from its constants: a name
    added there is guarded here without a change to this test."""
    values: set[str] = set()
    for key, value in vars(names).items():
        if not key.isupper():
            continue
        if isinstance(value, dict):  # SERIES: series name -> its metrics' prefix
            value = [*value, *value.values()]
        values |= {item for item in (value if isinstance(value, (tuple, list)) else [value]) if isinstance(item, str)}
    prefixes = tuple(sorted(value for value in values if value.endswith("_")))
    suffixes = set(names.QUARTILE_SUFFIXES)  # not names: what follows one
    return values - set(prefixes) - suffixes, prefixes


def metric_literals(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, literal) of each string constant of `source`, docstrings left out, that is a registry name or
    begins with a registry prefix (an f-string's literal parts count: f"ppl_{length}" spells "ppl_")."""
    metric_names, prefixes = registry()
    tree = ast.parse(source, filename)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            and (node.value in metric_names or node.value.startswith(prefixes))]


def test_the_scan_finds_a_spelt_name_and_skips_docstrings():
    source = ('"""ppl_512 in a docstring"""\n'
              'def f(metrics, length):\n'
              '    """train_loss, in prose."""\n'
              '    return metrics["train_loss"], f"ppl_{length}", "a train_loss in a message", metrics["loss"]\n')
    assert sorted(metric_literals(source)) == [(4, "ppl_"), (4, "train_loss")]
    metric_names, prefixes = registry()
    assert {names.VAL_LOSS, names.CHE_ACC_TEST, names.CONCURRENT_TRIALS_MAX, "ppl_by_length"} <= metric_names
    assert {names.PPL, names.ISOLATED_PREFIX, "che_acc_"} <= set(prefixes)


def test_no_metric_name_is_spelt_outside_its_home():
    found = {}
    for path in sorted([*(ROOT / "dape_core").rglob("*.py"), *(ROOT / "orchestrator").rglob("*.py")]):
        if path == HOME:
            continue
        relative = path.relative_to(ROOT).as_posix()
        for line, literal in metric_literals(path.read_text(), relative):
            found.setdefault((relative, literal), []).append(line)
    spelt = {f"{file}:{lines[0]}: {literal!r}" for (file, literal), lines in found.items()
             if (file, literal) not in ALLOWED}
    assert not spelt, ("metric names spelt as literals; read them from dape_core/metric_names.py (add a missing "
                       "one there): " + ", ".join(sorted(spelt)))
    stale = set(ALLOWED) - set(found)
    assert not stale, f"allowed literals no longer there (remove them from ALLOWED): {sorted(stale)}"

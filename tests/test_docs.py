"""The documentation site's generated pages and its one-place rule for figures (docsgen/, mkdocs.yml).

The references are generated from the code at each build; these tests fail when a study field, a command or an
option, or a metric name is missing from them, when README's table of studies is not the one the study files
give, when a benchmark record names a command that does not exist or states a named figure twice with different
values, and when a hand-written page quotes a measured figure instead of linking to the benchmarks page.
`.ci/run` builds the whole site with `mkdocs build --strict` (broken links fail it)."""

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # docsgen/ builds the site from the checkout and is not installed

from docsgen import benchmarks, catalogue, cli_reference, hooks, metrics_reference, study_reference  # noqa: E402


def _sections(markdown: str) -> dict[str, str]:
    """Level-2 sections of a generated page by their explicit anchor ({#id})."""
    found = {}
    for block in re.split(r"^## ", markdown, flags=re.M)[1:]:
        anchor = re.search(r"\{#([^}]+)\}", block.splitlines()[0])
        if anchor:
            found[anchor.group(1)] = block
    return found


def test_study_reference_has_every_field_of_every_object_of_the_schema():
    schema = study_reference.schema()
    sections = _sections(study_reference.render(schema))
    objects = {"Study file": schema, **schema["$defs"]}
    for name, node in objects.items():
        section = sections.get(study_reference.anchor(name))
        assert section is not None, f"no section for {name}"
        for field in node.get("properties", {}):
            assert f"| `{field}` |" in section, f"{name}.{field} is missing from the study-file reference"
    # The format's own top-level fields, named from the model, not the schema: each has its row.
    from orchestrator.study.model import Study

    top = sections[study_reference.anchor("Study file")]
    assert all(f"| `{field}` |" in top for field in Study.model_fields)


def test_study_reference_fails_when_a_field_is_missing():
    """The check above can fail: a schema with one more field than the rendered page lacks it."""
    schema = study_reference.schema()
    page = study_reference.render(schema)
    schema["$defs"]["Resources"]["properties"]["brand_new_field"] = {"type": "integer"}
    assert "brand_new_field" not in page and "brand_new_field" in study_reference.render(schema)


def test_cli_reference_has_every_command_and_option():
    import typer.main

    from orchestrator.cli import app

    sections = _sections(cli_reference.render())
    root = typer.main.get_command(app)
    leaves = []

    def walk(command, path):
        children = getattr(command, "commands", None)
        if children is None:
            leaves.append((path, command))
        else:
            for name, child in children.items():
                walk(child, f"{path} {name}")

    walk(root, "orchestrator")
    assert {"orchestrator run", "orchestrator evaluate", "orchestrator data prepare"} <= {path for path, _ in leaves}
    for path, command in leaves:
        section = sections.get(cli_reference.anchor(path))
        assert section is not None, f"{path} is missing from the command-line reference"
        for param in command.params:
            if getattr(param, "hidden", False):
                continue
            names = [*param.opts, *param.secondary_opts] if param.param_type_name == "option" else []
            for name in names:
                assert re.search(rf"`[^`]*{re.escape(name)}\b", section), f"{path} {name} is missing from the reference"
            if param.param_type_name == "argument":
                assert (param.metavar or param.name.upper()).split()[0].strip("[]{}.") in section, (path, param.name)


def test_metrics_reference_has_every_metric_name():
    from dape_core import metric_names

    page = metrics_reference.render()
    spelled = [value for name, value in vars(metric_names).items()
               if name.isupper() and isinstance(value, str)]
    assert len(spelled) > 15
    for value in spelled:
        assert f"`{value}`" in page, f"{value} is missing from the metric-names reference"


def test_every_benchmark_record_names_a_real_command_and_a_known_machine():
    import typer.main

    from orchestrator.cli import app

    commands = set(typer.main.get_command(app).commands)
    found = benchmarks.records()
    assert len(found) >= 8
    for record in found:
        for command in record.commands:
            script = re.match(r"python (tests/benchmarks/\S+\.py)", command)
            if script:
                assert ROOT.joinpath(script.group(1)).is_file(), (record.name, command)
            elif command.startswith("orchestrator "):
                assert command.split()[1] in commands, (record.name, command)
            else:
                assert command.startswith(("bash .ci/run", "python -m pytest")), (record.name, command)
        assert record.body, record.name
    page = benchmarks.render()
    assert all(f"{{#{record.name}}}" in page for record in found)


def test_a_named_figure_stated_twice_with_different_values_is_refused(tmp_path):
    header = ("---\ntitle: {title}\ncommand: orchestrator run studies/kernel_size.yaml\nmachine: dev-cpu\n"
              "figures: {{x: {value}}}\n---\nbody\n")
    tmp_path.joinpath("a.md").write_text(header.format(title="A", value=1.5))
    tmp_path.joinpath("b.md").write_text(header.format(title="B", value=1.5))
    assert benchmarks.figures(benchmarks.records(tmp_path)) == {"x": 1.5}  # the same value twice is one figure
    tmp_path.joinpath("b.md").write_text(header.format(title="B", value=2.0))
    with pytest.raises(benchmarks.RecordError, match="'x' is 1.5 in a and 2.0 in b"):
        benchmarks.render(tmp_path)
    assert benchmarks.figures(benchmarks.records()) is not None  # the shipped records agree


def test_recording_a_benchmark_writes_its_output_as_the_record(tmp_path):
    tmp_path.joinpath("tiny.md").write_text("---\ntitle: Tiny\ncommand: python -c \"print('one step 7.5 ms')\"\n"
                                            "machine: dev-cpu\norder: 5\nfigures: {step_ms: 9.9}\n---\nold body\n")
    benchmarks.record("tiny", folder=tmp_path, machine="dev-cpu-idle", cwd=tmp_path)
    again = benchmarks.parse(tmp_path / "tiny.md")
    assert "one step 7.5 ms" in again.body and "old body" not in again.body
    assert again.machine == "dev-cpu-idle" and again.order == 5 and again.figures == {}  # the old figure is gone
    tmp_path.joinpath("hand.md").write_text("---\ntitle: H\ncommand: orchestrator run studies/STUDY.yaml\n"
                                            "machine: dev-cpu\n---\nbody\n")
    with pytest.raises(benchmarks.RecordError, match="placeholder"):
        benchmarks.record("hand", folder=tmp_path)


# A measured figure: a number with a unit of time or throughput, in a sentence that says it was measured.
_FIGURE = re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|s|min|minutes|seconds|hours|MB/s|GB/s)\b")
_MEASURED = re.compile(r"\b(?:measured|took|timed|wall time|load average|load \d"
                       r"|in \d+(?:\.\d+)? (?:min|minutes|s|seconds)\b)", re.I)
# Every hand-written page: README and docs/ but the benchmark records. docs/cluster.md is left out while another
# change rewrites it; its test timings belong on the benchmarks page (docs/benchmarks/slurm-test.md).
HAND_WRITTEN = ["README.md", *sorted(
    path.relative_to(ROOT).as_posix() for path in ROOT.joinpath("docs").rglob("*.md")
    if "benchmarks" not in path.relative_to(ROOT / "docs").parts and path.name != "cluster.md")]


def measured_figures(text: str) -> list[str]:
    sentences = re.split(r"(?<=[.;:])\s+|\n\n", text)
    return [" ".join(sentence.split()) for sentence in sentences
            if _FIGURE.search(sentence) and _MEASURED.search(sentence)]


def test_the_figure_check_sees_a_measured_figure():
    assert measured_figures("The study took 8.2 min here. Its timeout is 30 s.") == ["The study took 8.2 min here."]


@pytest.mark.parametrize("page", HAND_WRITTEN)
def test_hand_written_pages_quote_no_measured_figure(page):
    """Measured figures live on the benchmarks page only (docs/benchmarks/*.md), with their command and machine."""
    assert measured_figures(ROOT.joinpath(page).read_text()) == []


def test_readme_table_of_studies_is_the_one_the_study_files_give():
    readme = ROOT.joinpath("README.md").read_text()
    assert catalogue.with_table(readme) == readme, "README's table of studies is stale: python -m docsgen readme"
    for path in ROOT.joinpath("studies").glob("*.yaml"):
        assert f"| `{path.name}` |" in readme


def test_readme_workflow_names_real_commands():
    import typer.main

    from orchestrator.cli import app

    readme = ROOT.joinpath("README.md").read_text()
    block = readme.split("## After the run", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    used = [line.split()[1] for line in block.splitlines() if line.startswith("orchestrator ")]
    assert {"evaluate", "report", "ui", "plan", "slurm", "doctor"} <= set(used)
    assert set(used) <= set(typer.main.get_command(app).commands)


def test_home_page_is_readme_with_links_into_the_site():
    page = hooks.home_page()
    assert "](docs/" not in page and "](guides/first-study.md)" in page and "](img/report.png)" in page
    assert "](benchmarks/)" in page
    pages = hooks.generated_pages()
    assert set(pages) == {"index.md", "reference/study-file.md", "reference/cli.md", "reference/metrics.md",
                          "benchmarks.md", "papers_catalogue.md"}


def test_readme_picture_of_a_report_is_a_small_png():
    from PIL import Image

    picture = ROOT / "docs" / "img" / "report.png"
    assert picture.stat().st_size < 150_000
    with Image.open(picture) as image:
        assert image.format == "PNG" and image.width <= 1000


def test_readme_stays_short():
    assert len(ROOT.joinpath("README.md").read_text().splitlines()) <= 200


def test_links_to_benchmark_records_point_at_the_benchmarks_page():
    page = "[a](../benchmarks/main-job.md), [b](benchmarks/), [c](../benchmarks/) and [d](claims.md)"
    assert hooks.record_links(page) == ("[a](../benchmarks.md#main-job), [b](benchmarks.md), "
                                        "[c](../benchmarks.md) and [d](claims.md)")


def test_a_records_links_written_from_its_own_file_work_on_the_generated_page():
    """A record is read in the repository (docs/benchmarks/NAME.md) and on the generated page one folder up: its
    links, written from its own file, are rebased so that both work (`mkdocs build --strict` refused the
    unrebased ones)."""
    records = ROOT / "docs" / "benchmarks"
    body = ("[the protocol](../protocol.md), [the main job](main-job.md), [a row](decisions.md#kernel), "
            "[a guide](../guides/claims.md#one), [the runner](../../orchestrator/run.py) and [Ray](https://docs.ray.io)")
    assert benchmarks.rebased(body, records) == (
        "[the protocol](protocol.md), [the main job](#main-job), [a row](#kernel), "
        "[a guide](guides/claims.md#one), [the runner](../orchestrator/run.py) and [Ray](https://docs.ray.io)")
    page = benchmarks.render()
    assert "](../protocol.md)" not in page and "](main-job.md)" not in page


def test_links_to_repository_files_outside_the_site_become_paths_and_broken_links_stay():
    page = ("See [the runner](../../orchestrator/run.py), [`tests/conftest.py`](../../tests/conftest.py), "
            "[a guide](claims.md), [gone](../../orchestrator/no_such_file.py) and [Ray](https://docs.ray.io).")
    assert hooks.outside_links(page, "guides/x.md") == (
        "See the runner (`orchestrator/run.py`), `tests/conftest.py`, [a guide](claims.md), "
        "[gone](../../orchestrator/no_such_file.py) and [Ray](https://docs.ray.io).")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_readme_shows_what_the_main_job_prints(tmp_path):
    """README's sample of the main job's output has the lines the report's summary prints for that study (its
    numbers elided): the study recorded into a store by the orchestrator's recorder (synthetic results, no
    training), and its summary built as `orchestrator run` prints it."""
    from docsgen.report_picture import synthetic_report
    from orchestrator.reporting import render_md

    readme = ROOT.joinpath("README.md").read_text()
    sample = readme.split("## What the main job prints", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    built = synthetic_report(tmp_path)
    printed = render_md.summary(built.document).splitlines()
    lines = sample.splitlines()
    assert lines[0] == printed[0]  # the counts
    heading = next(line for line in printed if line.startswith("Perplexity"))
    assert heading in lines
    header = printed[printed.index(heading) + 1]
    assert header in lines and printed[printed.index(heading) + 2] in lines  # the table's columns
    variants = [line.split("|")[1].strip() for line in printed[printed.index(heading) + 3:] if line.startswith("|")]
    assert variants and all(variant in sample for variant in variants)

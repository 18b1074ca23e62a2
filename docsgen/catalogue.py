"""README's table of studies, one line each, from the study files themselves: each file's `description:` and the
number of trials its default (CPU) profile expands to. `python -m docsgen readme` rewrites the table between its
markers; a test fails when README's table is not the one the study files give."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
STUDIES = ROOT / "studies"
README = ROOT / "README.md"
BEGIN = "<!-- studies: generated from studies/*.yaml by `python -m docsgen readme` -->"
END = "<!-- end of studies -->"


def rows() -> list[tuple[str, str, str]]:
    """(file, description, trials at the default profile) per study file, in name order."""
    from orchestrator import expand, parse_study
    from orchestrator.trial.trials import distinct

    found = []
    for path in sorted(STUDIES.glob("*.yaml")):
        study = parse_study(yaml.safe_load(path.read_text()))
        search = study.search
        if search is not None and search.algorithm != "grid":
            trials = f"{search.num_samples} samples"
        else:
            trials = str(len(distinct(expand(study))))
        found.append((path.name, " ".join(study.description.split()), trials))
    return found


def render() -> str:
    lines = ["| study | what it runs | trials (CPU) |", "|---|---|---|"]
    lines += [f"| `{name}` | {description.replace('|', '/')} | {trials} |" for name, description, trials in rows()]
    return "\n".join(lines)


def with_table(readme: str) -> str:
    """README's text with its table of studies regenerated (the markers must be there)."""
    if BEGIN not in readme or END not in readme:
        raise ValueError(f"README.md lacks the markers of its table of studies: {BEGIN} ... {END}")
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{render()}\n{END}{tail}"


def update(readme: Path = README) -> bool:
    """Rewrite README's table; True when it changed."""
    text = readme.read_text()
    new = with_table(text)
    if new != text:
        readme.write_text(new)
    return new != text

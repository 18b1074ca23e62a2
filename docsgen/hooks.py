"""MkDocs hooks (mkdocs.yml `hooks:`): the pages generated from the code, added to the site at each build, and
the home page taken from README.md, so that no page of the site is a second copy of something written elsewhere."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `mkdocs` runs from its own script's folder: import this checkout's code
    sys.path.insert(0, str(ROOT))

from mkdocs.structure.files import File  # noqa: E402


def generated_pages() -> dict[str, str]:
    """The site's generated pages: path under docs/ -> Markdown."""
    from docsgen import benchmarks, cli_reference, metrics_reference, study_reference

    return {
        "index.md": home_page(),
        "reference/study-file.md": study_reference.render(),
        "reference/cli.md": cli_reference.render(),
        "reference/metrics.md": metrics_reference.render(),
        "benchmarks.md": benchmarks.render(),
    }


def home_page(readme: Path = ROOT / "README.md") -> str:
    """README.md as the site's home page: its links into docs/ made relative to the site."""
    text = readme.read_text()
    text = text.replace("](docs/benchmarks/)", "](benchmarks.md)")
    return re.sub(r"\]\(docs/", "](", text)


def on_files(files, config):
    for path, content in generated_pages().items():
        existing = files.get_file_from_path(path)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, path, content=content))
    return files

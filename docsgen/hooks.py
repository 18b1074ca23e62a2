"""MkDocs hooks (mkdocs.yml `hooks:`): the pages generated from the code, added to the site at each build, and
the home page taken from README.md, so that no page of the site is a second copy of something written elsewhere."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]


def _checkout_importable() -> None:
    """`mkdocs` runs from its own script's folder, and loads this file with the hook's folder put first on
    sys.path and taken off again (the first entry, whatever it is then): so this checkout's folder is added at
    the end, when the pages are made, not at import."""
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))


def generated_pages() -> dict[str, str]:
    """The site's generated pages: path under docs/ -> Markdown."""
    _checkout_importable()
    from docsgen import benchmarks, cli_reference, metrics_reference, papers_catalogue, study_reference

    return {
        "index.md": home_page(),
        "reference/study-file.md": study_reference.render(),
        "reference/cli.md": cli_reference.render(),
        "reference/metrics.md": metrics_reference.render(),
        "benchmarks.md": benchmarks.render(),
        "papers_catalogue.md": papers_catalogue.render(),
    }


def home_page(readme: Path = ROOT / "README.md") -> str:
    """README.md as the site's home page: its links into docs/ made relative to the site."""
    return re.sub(r"\]\(docs/", "](", readme.read_text())


def on_files(files, config):
    for path, content in generated_pages().items():
        existing = files.get_file_from_path(path)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, path, content=content))
    return files


_LINK = re.compile(r"(?<!!)\[([^\]\n]+)\]\(([^)\s#]+)(#[^)\s]*)?\)")


def outside_links(markdown: str, page_path: str, docs_dir: Path = ROOT / "docs") -> str:
    """Links from a page to files of the repository outside docs/ (`../orchestrator/run.py`), which the site
    cannot serve, written as the file's path instead; a link to a file that does not exist is left as it is,
    for the build to refuse."""
    folder = (docs_dir / page_path).parent

    def replace(match: re.Match) -> str:
        text, target = match.group(1), match.group(2)
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("/"):
            return match.group(0)  # a URL, or a site-absolute link
        resolved = (folder / target).resolve()
        inside = resolved == docs_dir.resolve() or docs_dir.resolve() in resolved.parents
        if inside or not resolved.exists() or ROOT.resolve() not in resolved.parents:
            return match.group(0)
        relative = resolved.relative_to(ROOT.resolve()).as_posix()
        return text if text.strip("`") == relative else f"{text} (`{relative}`)"

    return _LINK.sub(replace, markdown)


_RECORD = re.compile(r"\]\(((?:\.\./)*)benchmarks/(?:([a-z0-9-]+)\.md)?\)")


def record_links(markdown: str) -> str:
    """Links to a benchmark record (`benchmarks/main-job.md`, a file of the repository that the site leaves out)
    or to the records' folder, pointed at the generated benchmarks page (`benchmarks.md#main-job`)."""
    return _RECORD.sub(lambda m: f"]({m.group(1)}benchmarks.md" + (f"#{m.group(2)})" if m.group(2) else ")"), markdown)


def on_page_markdown(markdown, page, config, files):
    return outside_links(record_links(markdown), page.file.src_uri)

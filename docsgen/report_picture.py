"""README's picture of a report, docs/img/report.png, redrawn from the code:

    python -m docsgen.report_picture

The main job's study (studies/kernel_size.yaml) is recorded into a temporary MLflow store by
tests/synthetic_store.py (the orchestrator's own recorder, synthetic results: no training), its report is built
as `orchestrator report` builds it, and headless Chromium photographs the top of report.html; the picture is then
reduced to a small palette PNG. The numbers in it are synthetic: the picture shows the report's layout, the
benchmarks page has the measured ones."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "studies" / "kernel_size.yaml"
OUTPUT = ROOT / "docs" / "img" / "report.png"
WINDOW = (1100, 2000)  # CSS pixels photographed (the blank below the page's end is cropped)
WIDTH = 820  # the committed picture's width in pixels
COLOURS = 64  # its palette


def synthetic_report(folder: Path):
    """The main job's study recorded into a store in `folder` (synthetic results: no training) and its report
    built there as `orchestrator report` builds it; the built report (its `document`, its `folder`)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import synthetic_store
    import yaml

    from orchestrator import parse_study
    from orchestrator.reporting.build import build_report as build
    from orchestrator.run_context import RunContext

    study = parse_study(yaml.safe_load(STUDY.read_text()))
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    synthetic_store.write_store(study, uri, later=True)  # report.lengths too, as `orchestrator run` scores them
    return build(RunContext.open(study, uri), folder / "reports")


def build_report(folder: Path) -> Path:
    """The study's report.html from a synthetic store in `folder`."""
    return synthetic_report(folder).folder / "report.html"


def excerpt(page: Path) -> Path:
    """A page of the report's parts, beside it (the same styles): its title, the headline table with its heading,
    the perplexity-by-length plot."""
    html = page.read_text()
    head = html[:html.index("</head>") + len("</head>")]
    title = html[html.index("<h1>"):html.index("</h1>") + len("</h1>")]
    start = html.index("<h2>Perplexity by evaluation length")
    table = html[start:html.index("<h2", start + 4)]  # to the next section's heading, whatever its attributes
    start = html.index('<figure id="plot-perplexity_vs_length"')
    figure = html[start:html.index("</figure>", start) + len("</figure>")]
    out = page.with_name("excerpt.html")
    out.write_text(f"{head}<body>{title}{table}{figure}</body></html>")
    return out


def photograph(page: Path, shot: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("Chromium is needed: apt-get install -y chromium")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--user-data-dir={profile}", f"--window-size={WINDOW[0]},{WINDOW[1]}",
                        f"--screenshot={shot}", page.as_uri()], check=True, capture_output=True, timeout=120)


def reduce(shot: Path, output: Path) -> None:
    """The shot cropped to its content, scaled to WIDTH, as a palette PNG."""
    from PIL import Image, ImageOps

    image = Image.open(shot).convert("RGB")
    box = ImageOps.invert(image).getbbox()
    if box is None:
        raise SystemExit(f"{shot}: Chromium drew a blank page")
    image = image.crop((0, max(box[1] - 24, 0), image.width, min(box[3] + 24, image.height)))
    height = round(image.height * WIDTH / image.width)
    small = image.resize((WIDTH, height), Image.Resampling.LANCZOS).quantize(colors=COLOURS)
    output.parent.mkdir(parents=True, exist_ok=True)
    small.save(output, optimize=True)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="report_picture_") as folder:
        page = build_report(Path(folder))
        shot = Path(folder) / "shot.png"
        photograph(excerpt(page), shot)
        reduce(shot, OUTPUT)
    print(f"{OUTPUT.relative_to(ROOT)}: {OUTPUT.stat().st_size // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The HTML report renders in headless Chromium, and `orchestrator ui` serves the study in MLflow's UI."""

import base64
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
import report_study
from PIL import Image
from typer.testing import CliRunner

from orchestrator.cli import app

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # a study, then Chromium (240 s bounds)
INSTALL_HINT = "Chromium is needed to render the HTML report: apt-get update && apt-get install -y chromium"
HEADLESS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--enable-logging=stderr", "--v=0"]


@pytest.fixture(scope="module")
def built(tmp_path_factory, local_ray):
    return report_study.build(tmp_path_factory.getbasetemp() / "tiny_report_study")


@pytest.fixture(scope="module")
def chromium():
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail(INSTALL_HINT)
    return path


def _chromium(chromium, profile, *args, timeout=90) -> subprocess.CompletedProcess:
    return subprocess.run([chromium, *HEADLESS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=timeout)


def _console_messages(stderr: str) -> list[str]:
    """Page console output (JS errors, failed loads) as Chromium logs it; D-Bus noise is not the page's."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_html_report_renders_in_chromium(built, chromium, tmp_path):
    page = built.report_dir / "report.html"
    html = page.read_text()
    # Self-contained: every image is inline and decodes as a PNG; no external resources to fetch.
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    # perplexity and ΔP vs length, perplexity vs kernel size, training curves, and the cost front (quality against
    # ms per step, cost_front.py)
    assert len(images) == 5
    for data in images:
        Image.open(io.BytesIO(base64.b64decode(data))).verify()
    assert not re.search(r'src="(https?:)?//', html)
    assert not re.search(r'<link[^>]*href="(https?:)?//', html)
    # Its only links out are navigation, not resources: each run id to its page in the MLflow UI.
    links = re.findall(r'<a [^>]*href="((?:https?:)?//[^"]*)"', html)
    assert links and all(re.fullmatch(r"http://127\.0\.0\.1:\d+/#/experiments/\d+/runs/[0-9a-f]{32}"
                                      r"\?workflowType=machine_learning", link) for link in links), links

    shot = tmp_path / "report.png"
    # Tall enough for the plots, which follow the tables, the claims, the cost front and the published values.
    rendered = _chromium(chromium, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,7000",
                         page.as_uri())
    assert rendered.returncode == 0, rendered.stderr[-2000:]
    assert _console_messages(rendered.stderr) == []
    image = Image.open(shot).convert("RGB")
    assert image.size == (1280, 7000)
    colours = image.getcolors(maxcolors=1 << 20)
    assert len(colours) > 50  # text, rules, plots: not a blank page
    # The plots' lines are drawn in matplotlib's first colours (blue, orange); nothing else on the page is.
    pixels = image.load()
    plotted = sum(1 for x in range(0, 1280, 2) for y in range(0, 4000, 2)
                  if abs(pixels[x, y][0] - 31) < 40 and abs(pixels[x, y][1] - 119) < 40
                  and abs(pixels[x, y][2] - 180) < 40)
    assert plotted > 200, "the embedded plots did not render"

    dom = _chromium(chromium, tmp_path / "profile", "--dump-dom", page.as_uri())
    assert dom.returncode == 0 and _console_messages(dom.stderr) == []
    assert dom.stdout.count("<img") == 5
    assert re.search(r'<table class="results" id="table-perplexity">.*?</table>', dom.stdout, re.S)
    body_rows = re.search(r'id="table-perplexity">.*?<tbody>(.*?)</tbody>', dom.stdout, re.S).group(1)
    assert body_rows.count("<tr") == 2 and "DAPE1x3-Kerple" in body_rows


def test_table_1_is_above_the_first_scroll(built, chromium, tmp_path):
    """The result first: in a 1280 x 1000 px Chromium window, Table 1 (perplexity) is whole on the first screen,
    before any other section. Measured by the browser's layout (getBoundingClientRect), read back from the DOM
    of a copy of the report with a probe script."""
    html = (built.report_dir / "report.html").read_text()
    probe = ("<script>const table = document.getElementById('table-perplexity').getBoundingClientRect();"
             "const next = document.querySelectorAll('h2')[1].getBoundingClientRect();"
             "document.body.setAttribute('data-probe', [table.top, table.bottom, next.top, window.innerHeight]"
             ".join(','));</script>")
    page = tmp_path / "probe.html"
    page.write_text(html.replace("</body>", probe + "</body>"))
    dom = _chromium(chromium, tmp_path / "profile", "--window-size=1280,1000", "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    probed = re.search(r'data-probe="([^"]+)"', dom.stdout)
    assert probed, dom.stdout[-3000:]
    top, bottom, after, height = map(float, probed.group(1).split(","))
    assert 0 < top < bottom <= height <= 1000, (top, bottom, height)
    assert after > bottom  # the section after Table 1 (ΔP's table here) starts below it


def _read_until(stream, pattern: str, timeout: float) -> tuple[re.Match | None, list[str]]:
    lines, found = [], []

    def reader():
        for line in stream:
            lines.append(line)
            match = re.search(pattern, line)
            if match:
                found.append(match)
                return

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    thread.join(timeout)
    return (found[0] if found else None), lines


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status, response.read().decode()


def _page_text(dom: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", re.sub(r"<(script|style)[^>]*>.*?</\1>", "", dom, flags=re.S)))


def test_orchestrator_ui_serves_the_study(built, chromium, tmp_path):
    port = _free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    server = subprocess.Popen([sys.executable, "-m", "orchestrator", "ui", str(built.study_file),
                               "--tracking-uri", built.tracking_uri, "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    output: list[str] = []
    try:
        match, lines = _read_until(server.stdout, r"MLflow UI for study tiny_report: (http://\S+)", timeout=180)
        output += lines
        assert match, "".join(lines)[-3000:]
        page = match.group(1)
        base = f"http://127.0.0.1:{port}"
        # The study's runs page, in MLflow's machine-learning workflow, with the study's saved view.
        assert page.startswith(f"{base}/#/experiments/") and "/runs?" in page
        assert "workflowType=machine_learning" in page and "viewStateShareKey=orchestrator-study" in page
        experiment_id = page.split("/#/experiments/")[1].split("/")[0]

        assert _get(f"{base}/health")[0] == 200
        _, body = _get(f"{base}/api/2.0/mlflow/experiments/get-by-name?experiment_name=tiny_report")
        assert json.loads(body)["experiment"]["experiment_id"] == experiment_id
        request = urllib.request.Request(
            f"{base}/api/2.0/mlflow/runs/search", method="POST", headers={"Content-Type": "application/json"},
            data=json.dumps({"experiment_ids": [experiment_id], "max_results": 100}).encode())
        with urllib.request.urlopen(request, timeout=30) as response:
            runs = json.load(response)["runs"]
        parent = next(run for run in runs if run["info"]["run_name"] == "tiny_report")
        _, artifacts = _get(f"{base}/api/2.0/mlflow/artifacts/list?run_id={parent['info']['run_id']}")
        assert "report.html" in {item["path"] for item in json.loads(artifacts)["files"]}

        # The printed address, rendered by MLflow's web app in a fresh browser profile: the runs table lists
        # every trial (not the GenAI overview, not the trials folded under the study's parent run).
        names = [f"{label} · s{seed}" for label in report_study.LABELS for seed in (0, 1, 2)]
        dom = _chromium(chromium, tmp_path / "profile", "--virtual-time-budget=60000", "--window-size=1600,1200",
                        "--dump-dom", page, timeout=240)
        text = _page_text(dom.stdout)
        missing = [name for name in names if name not in text]
        assert not missing, (missing, text[:3000])
        assert "Study dashboard (orchestrator)" in text and "6 matching runs" in text
        # The chart view of the same page: the study's charts only (by-length series, training loss, the
        # headline metric, the swept values), not one chart per logged number.
        charts = _chromium(chromium, tmp_path / "profile2", "--virtual-time-budget=60000", "--window-size=1600,1600",
                           "--dump-dom", page + "&compareRunsMode=CHART", timeout=240)
        text = _page_text(charts.stdout)
        assert "Model metrics (5)" in text, text[:3000]
        for title in ("ppl_by_length", "delta_p_by_length", "train_loss", "ppl_128"):  # MLflow titles charts by key
            assert title in text, title
        assert "ms_per_step" not in text

        # A run id of the report's trials table links to that run's page in the UI `orchestrator ui` serves
        # (at its default port there; here the test's port): MLflow's web app shows that run.
        html = (built.report_dir / "report.html").read_text()
        link, run_id = re.search(r'<a href="http://127\.0\.0\.1:5000(/#/experiments/[^"]+/runs/([0-9a-f]{32})\?workflowType=machine_learning)">\2</a>',
                                 html).groups()
        assert "orchestrator ui STUDY" in html
        run_name = next(run["info"]["run_name"] for run in runs if run["info"]["run_id"] == run_id)
        run_page = _chromium(chromium, tmp_path / "profile3", "--virtual-time-budget=30000", "--window-size=1600,1200",
                             "--dump-dom", base + link, timeout=240)
        text = _page_text(run_page.stdout)
        assert run_name in text and run_id in text and "Parameters" in text, text[:3000]
        # MLflow's classic run page: the machine-learning side bar, not the GenAI one (Evaluation, Judges, Prompts).
        assert "Model registry" in text and "Judges" not in text and "Prompts" not in text, text[:3000]

        # The run's per-length results as a table artifact, which the UI shows as a table.
        table_page = _chromium(chromium, tmp_path / "profile4", "--virtual-time-budget=30000",
                               "--window-size=1600,1200", "--dump-dom",
                               base + link.replace("?", "/artifacts/results_by_length.json?"), timeout=240)
        text = _page_text(table_page.stdout)
        assert "View as table" in text, text[:3000]
        assert re.search(r"length ppl delta_p( ms_forward)? 32 [0-9.]+ 0 ", text), text[:3000]

        # The study's parent run holds the report, which the UI opens in place (an HTML artifact in an iframe).
        parent_link = link.replace(run_id, parent["info"]["run_id"]).replace("?", "/artifacts/report.html?")
        report_page = _chromium(chromium, tmp_path / "profile5", "--virtual-time-budget=30000",
                                "--window-size=1600,1200", "--dump-dom", base + parent_link, timeout=240)
        assert re.search(r'<iframe[^>]*class="mlflow-html-iframe"', report_page.stdout), report_page.stdout[-3000:]

        # For a tracking server, `orchestrator ui` names the study's page there.
        remote = CliRunner().invoke(app, ["ui", str(built.study_file), "--tracking-uri", base])
        assert remote.exit_code == 0, remote.output
        assert f"{base}/#/experiments/{experiment_id}/runs?workflowType=machine_learning" in remote.output
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            rest, _ = server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            raise
        output.append(rest)
    assert server.returncode == 0
    # Quiet: the two lines `orchestrator ui` prints, no warning, no log line per request (the browser made dozens).
    printed = [line for line in "".join(output).splitlines() if line.strip()]
    assert len(printed) == 2 and printed[0].startswith("Starting the MLflow UI"), printed[:20]
    time.sleep(0.5)
    with pytest.raises(OSError):  # the MLflow server went with it
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=3)

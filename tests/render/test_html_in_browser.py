"""The HTML report in a real headless browser (Debian's chromium): parsed, laid out, drawn.

Skips when chromium is absent, except under CI (CI=true), where it fails: `make test`
installs chromium when run as root.
"""

import dataclasses
import json
import os
import re
import shutil
import subprocess
import tempfile

import pytest

from gradient_doctor.core.report import Report
from gradient_doctor.render.html_report import write_html_report
from tests.render.conftest import exp_overflow_finding, headroom_warning
from tests.render.test_html_report import HOSTILE, watched_series

pytestmark = pytest.mark.slow

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1200,2400",
)
# Appended to a copy of the page (the report itself has no scripts): measures what the
# browser laid out, into an element that --dump-dom then shows.
MEASURE = """<script>
const plots = [...document.querySelectorAll("svg.plot")].map(svg => ({
  width: svg.getBoundingClientRect().width,
  height: svg.getBoundingClientRect().height,
  lines: [...svg.querySelectorAll("polyline.series-line")].map(p => p.getTotalLength()),
  limits: svg.querySelectorAll("line.limit-line").length,
}));
const out = document.createElement("pre");
out.id = "measured";
out.textContent = JSON.stringify({plots, scripts: document.scripts.length});
document.body.appendChild(out);
</script>"""


@pytest.fixture(scope="module")
def chromium():
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail(
                "chromium is required under CI (CI=true) to test the HTML report in a real "
                "browser: install Debian's `chromium` package (`make test` does, as root)."
            )
        pytest.skip(
            "chromium is not installed: `apt-get install chromium` (or run `make test` as "
            "root) to test the HTML report in a real browser."
        )
    return path


def browse(chromium, page, *action):
    with tempfile.TemporaryDirectory() as profile:
        completed = subprocess.run(
            [chromium, *FLAGS, f"--user-data-dir={profile}", *action, page.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert completed.returncode == 0, completed.stderr[-2000:]
    return completed.stdout


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    problem = exp_overflow_finding(step=199)
    source = dataclasses.replace(problem.origin.source, code=HOSTILE)
    problem = dataclasses.replace(
        problem, origin=dataclasses.replace(problem.origin, source=source)
    )
    report = Report("train.py", 200, (problem,), (headroom_warning(),), series=watched_series())
    path = tmp_path_factory.mktemp("browser") / "report.html"
    write_html_report(report, path)
    return path


def test_the_browser_lays_out_every_plot_and_line(chromium, page):
    measured_page = page.with_name("measured.html")
    measured_page.write_text(page.read_text().replace("</body>", MEASURE + "</body>"))
    dom = browse(chromium, measured_page, "--dump-dom")
    measured = json.loads(
        re.search(r'<pre id="measured">(.*?)</pre>', dom, flags=re.S)[1].replace("&quot;", '"')
    )
    assert measured["scripts"] == 1  # only the measuring script: the report has none
    plots = measured["plots"]
    assert len(plots) == 3
    for plot in plots:
        assert plot["width"] > 600 and plot["height"] > 150
        assert plot["lines"] and all(length > 100 for length in plot["lines"])
    assert [plot["limits"] for plot in plots] == [0, 0, 1]


def test_the_rendered_dom_holds_the_finding_and_escaped_code(chromium, page):
    dom = browse(chromium, page, "--dump-dom")
    assert dom.count('<svg class="plot"') == 3
    assert "forward_overflow at step 199" in dom
    assert "<dd>message_passing/Exp</dd>" in dom
    assert "alert(1)" in dom and "<script>" not in dom  # the user's code stayed text
    assert HOSTILE not in dom


def test_a_screenshot_is_drawn(chromium, page):
    shot = page.with_name("report.png")
    browse(chromium, page, f"--screenshot={shot}")
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 50_000  # a blank page of this size compresses to a few kilobytes

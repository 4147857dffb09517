"""The self-contained `report.html`, opened in a real headless browser (Debian's `chromium`,
installed by scripts/test.sh): every chart is drawn and no script error occurs."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from benchmarks import checkpoint_modes as cm
from benchmarks import modes_table
from benchmarks.figures import figures
from benchmarks.html_report import write_report
from benchmarks.modes_outcome import Combination

TINY = cm.replace_profile("sim", True, rate=20_000, duration=0.25, warmup=0.0, max_rate_records=4_000,
                          backpressure_rate=100_000)
COMBOS = [("slow-channel", "aligned"), ("slow-channel", "unaligned"), ("backpressure", "aligned"),
          ("backpressure", "unaligned-debloat")]


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("chromium is not installed: run scripts/test.sh, or apt-get install -y chromium", pytrace=False)
    return path


class _Tags(HTMLParser):
    """Attributes of the first <html> and <body> and of every <figure> in a DOM dump."""

    def __init__(self) -> None:
        super().__init__()
        self.html: dict[str, str | None] | None = None
        self.body: dict[str, str | None] | None = None
        self.figures: list[dict[str, str | None]] = []
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "html" and self.html is None:
            self.html = found
        elif tag == "body" and self.body is None:
            self.body = found
        elif tag == "figure":
            self.figures.append(found)
        if tag in ("script", "link", "img", "iframe") and (found.get("src") or found.get("href")):
            self.external.append(f"<{tag}> {found.get('src') or found.get('href')}")


def rendered_dom(path) -> _Tags:
    """Open `path` in headless chromium and parse the DOM after its scripts ran."""
    try:
        done = subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
                               "--dump-dom", f"file://{path}"], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail(f"chromium did not finish rendering {path} within 120 s", pytrace=False)
    if done.returncode != 0 or "<body" not in done.stdout:
        pytest.fail(f"chromium could not start or render {path} (exit {done.returncode}): {done.stderr[-2000:]}",
                    pytrace=False)
    tags = _Tags()
    tags.feed(done.stdout)
    return tags


@pytest.fixture(scope="module")
def payload() -> dict:
    outcomes = [cm.run_combination(Combination("sim", scenario, mode, 2), TINY) for scenario, mode in COMBOS]
    return cm.payload_of(outcomes, {"executor": "sim", "quick": True})


@pytest.mark.slow
def test_every_chart_renders_without_script_errors(payload, tmp_path) -> None:
    expected = figures(payload)
    # both scenarios' latency, durations, barrier timeline and phase Gantt
    assert len(expected) == 8 and {f["id"].rsplit("-", 1)[1] for f in expected} == {
        "latency", "durations", "timeline", "phases"}
    path = write_report(payload, str(tmp_path), columns=modes_table.TABLE_COLUMNS,
                        target_lines=["sim demo: p99 < 2x (target: NOT met; why)"])
    page = Path(path).read_text()
    dom = rendered_dom(path)
    assert dom.external == []  # self-contained: no network needed to open it
    assert "data-errors" not in (dom.html or {}) and "data-errors" not in (dom.body or {}), dom.html
    assert dom.body["data-figures"] == str(len(expected))
    assert dom.body["data-rendered"] == str(len(expected))
    assert [f["id"] for f in dom.figures] == [f"fig-{f['id']}" for f in expected]
    for figure in dom.figures:
        assert figure.get("data-rendered") == "1" and "data-error" not in figure, figure
        assert int(figure["data-marks"]) > 0, figure
    # the target lines and the table are there too
    assert '<li class="notmet">sim demo: p99 &lt; 2x (target: NOT met; why)</li>' in page
    assert "<td class=\"l\">unaligned-debloat</td>" in page


@pytest.mark.slow
def test_a_script_error_is_caught_by_the_check(payload, tmp_path) -> None:
    """The check above would notice a broken chart: a figure the renderer chokes on is reported."""
    path = Path(write_report(payload, str(tmp_path), columns=modes_table.TABLE_COLUMNS))
    path.write_text(path.read_text().replace('"panels":[', '"panels":null,"was":[', 1))
    dom = rendered_dom(path)
    assert "data-errors" in dom.body
    assert int(dom.body["data-rendered"]) == int(dom.body["data-figures"]) - 1

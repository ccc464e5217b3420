"""The report in a real headless Chromium: the DOM it builds, a screenshot that is not blank, and the layout
of the benchmark, validate and stress pages at 1280 and 1920 px (nothing wider than the window, no label
clipped).

Chromium comes from PATH; when it is missing and this runs as root with apt-get, Debian's package is
installed once (with timeouts). Otherwise the tests skip and say why. Every Chromium runs in a
session of its own, and that whole process group is killed when the run ends, so no helper process
(zygote, renderer, GPU) outlives a test.
"""

from __future__ import annotations

import copy
import html
import json
import os
import re
import shutil
import signal
import subprocess
import uuid

import numpy as np
import pytest

from mlts.report.html import render_report, write_report
from tests.report._dom import parse_html
from tests.report._full_run import (
    DRIVERS,
    FLOAT,
    OTHER,
    QUANT,
    full_run_doc,
    multi_process_stress_doc,
    wide_validate_doc,
)
from tests.report._sample import sample_doc

PIL = pytest.importorskip("PIL.Image", reason="Pillow comes with the test extra")

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
RUN_TIMEOUT_S = 60
APT_UPDATE_TIMEOUT_S = 300
APT_INSTALL_TIMEOUT_S = 900
# The page's own markup, as a model name: a browser that ran it would mark the body.
EVIL = "<script>document.body.setAttribute('data-pwned', '1')</script>"
WORSE_BG = (0xFB, 0xE1, 0xDC)  # the "worse" cell background in the report's CSS
HEADER_BG = (0x20, 0x30, 0x3C)


def _find_chromium() -> str | None:
    return next((path for name in NAMES if (path := shutil.which(name))), None)


def _install_chromium() -> str:
    """Try Debian's chromium package; return why it could not be done ("" when it was)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "chromium is not on PATH and installing it needs root"
    if shutil.which("apt-get") is None:
        return "chromium is not on PATH and there is no apt-get to install it"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    steps = [
        (["apt-get", "update"], APT_UPDATE_TIMEOUT_S),
        (["apt-get", "install", "-y", "chromium"], APT_INSTALL_TIMEOUT_S),
    ]
    for cmd, timeout in steps:
        try:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return f"'{' '.join(cmd)}' took more than {timeout} s"
        if r.returncode != 0:
            tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
            return f"'{' '.join(cmd)}' failed: {tail}"
    return ""


@pytest.fixture(scope="module")
def chromium() -> str:
    exe = _find_chromium()
    if exe is None:
        reason = _install_chromium()
        exe = _find_chromium()
        if exe is None:
            reason = reason or "chromium was installed but is still not on PATH"
            print(f"skipping the browser tests: {reason}")
            pytest.skip(reason)
    return exe


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill what is left of the process group this Chromium leads (it was started in its own session)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_chromium(exe: str, tmp_path, *args: str) -> str:
    """Chromium's stdout for `args`, with a fresh profile; fails the test after 60 s."""
    profile = tmp_path / f"profile-{uuid.uuid4().hex}"
    cmd = [exe, *FLAGS, f"--user-data-dir={profile}", *args]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        proc.communicate()
        pytest.fail(f"chromium did not finish within {RUN_TIMEOUT_S} s: {' '.join(args)}")
    finally:
        _kill_group(proc)
    assert proc.returncode == 0, err[-2000:]
    return out


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """The sample report, plus one row whose model name is markup that must stay text."""
    doc = copy.deepcopy(sample_doc())
    extra = copy.deepcopy(next(r for r in doc["results"] if r["backend"] == "cpu:onnxruntime"))
    extra.update(model=EVIL, family="escaping")
    doc["results"].append(extra)
    path = tmp_path_factory.mktemp("browser") / "report.html"
    write_report(doc, path)
    return path


def test_rendered_dom_has_the_tables_and_charts(chromium, page, tmp_path):
    dom = parse_html(run_chromium(chromium, tmp_path, "--dump-dom", page.as_uri()))
    body = dom.find("body")
    assert "data-pwned" not in body.attrs
    families = [t.attrs["data-family"] for t in dom.find_all("table", "inference")]
    assert families == ["mobilenet_v1", "mobilenet_v2", "mobilenet_v1_quant", "asr", "escaping"]
    row = dom.find("tr", "result", data_model=EVIL, data_backend="cpu:onnxruntime")
    assert row.find_all("td")[0].text == EVIL
    worse = dom.find("tr", "result", data_model="mobilenet_v1_0.25_128", data_backend="driver:sample-all")
    assert "worse" in worse.find("td", "diff").classes
    svgs = [s for s in dom.iter("svg") if "ratio" not in s.attrs.get("class", "")]
    assert len(svgs) == 10  # a histogram and a CDF for each of the 5 models
    ratio = [s for s in dom.iter("svg") if "ratio" in s.attrs.get("class", "")]
    assert len(ratio) == 1 and ratio[0].find_all("circle")  # the overview's driver ÷ reference chart
    for svg in svgs:
        marks = svg.find_all("path", "series") + svg.find_all("rect", "bar")
        assert marks, svg.attrs.get("class")
        for p in svg.find_all("path", "series"):
            assert len(p.attrs["d"].split("L")) > 3
        for b in svg.find_all("rect", "bar"):
            assert float(b.attrs["height"]) > 0
    assert dom.find("table", "compilation").find_all("tr", data_backend="driver:sample-all")


def test_screenshot_is_not_blank(chromium, page, tmp_path):
    shot = tmp_path / "report.png"
    run_chromium(chromium, tmp_path, f"--screenshot={shot}", "--window-size=1280,2000", page.as_uri())
    with PIL.open(shot) as im:
        rgb = np.asarray(im.convert("RGB"))
    assert rgb.shape[:2] == (2000, 1280)
    pixels = rgb.reshape(-1, 3)
    distinct = np.unique(pixels, axis=0).shape[0]
    white = np.all(pixels == 255, axis=1).mean()
    assert distinct > 100, distinct  # text anti-aliasing, table shading, charts
    assert white < 0.95, white
    assert np.all(rgb[10, 10] == HEADER_BG)  # the CSS was applied: the dark page header
    assert np.all(pixels == WORSE_BG, axis=1).sum() > 500  # the red "worse" cells are on the first screen


# --- layout at 1280 and 1920 px -----------------------------------------------------------------------

LAYOUT_WIDTHS = (1280, 1920)
# Runs at the end of each measured page (a copy made for the test: the report itself has no script) and
# writes what it found into the parent page, which Chromium dumps. A label is clipped when its box
# reaches left of the page, past an SVG's viewport, or past an ancestor that cuts its content (overflow
# hidden or clip); a scrolling ancestor (.table-wrap) does not clip, it scrolls.
MEASURE_JS = """
(function () {
  var de = document.documentElement, labels = 0, clipped = [], scrolling = 0, ratioLabels = 0;
  function cutters(el) {
    var found = [];
    for (var a = el.parentElement; a; a = a.parentElement) {
      if (a.tagName.toLowerCase() === "svg") { found.push(a); continue; }
      var o = getComputedStyle(a).overflowX;
      if (o === "hidden" || o === "clip") found.push(a);
    }
    return found;
  }
  var all = document.querySelectorAll("text, th, td, dt, dd, summary, caption, h1, h2, h3, h4, p, li, figcaption, a, code");
  for (var i = 0; i < all.length; i++) {
    var el = all[i], r = el.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;
    labels++;
    var why = r.left + window.scrollX < -0.5 ? "left of the page" : null;
    var cut = cutters(el);
    for (var k = 0; k < cut.length && !why; k++) {
      var c = cut[k].getBoundingClientRect();
      if (r.left < c.left - 0.5 || r.right > c.right + 0.5) why = "outside its " + cut[k].tagName;
    }
    if (why) clipped.push(why + ": <" + el.tagName + "> " + (el.textContent || "").slice(0, 80));
  }
  var wraps = document.querySelectorAll(".table-wrap");
  for (var j = 0; j < wraps.length; j++) if (wraps[j].scrollWidth > wraps[j].clientWidth) scrolling++;
  ratioLabels = document.querySelectorAll("svg.ratio text.label").length;
  parent.document.getElementById("out-" + MLTS_FRAME).textContent = JSON.stringify({
    scrollWidth: de.scrollWidth, clientWidth: de.clientWidth, innerWidth: window.innerWidth,
    labels: labels, clipped: clipped, scrollingTables: scrolling, ratioLabels: ratioLabels
  });
})();
"""


@pytest.fixture(scope="module")
def layouts(chromium, tmp_path_factory) -> dict[tuple[str, int], dict]:
    """(page, width) -> what MEASURE_JS found, for each page in an iframe of that width (one Chromium)."""
    pages = {
        "benchmark": render_report(full_run_doc()),
        "validate": render_report(wide_validate_doc()),
        "stress": render_report(multi_process_stress_doc()),
    }
    frames = []
    for name, page_html in pages.items():
        for width in LAYOUT_WIDTHS:
            frame = f"{name}-{width}"
            script = f"<script>var MLTS_FRAME = {json.dumps(frame)};{MEASURE_JS}</script></body>"
            measured = page_html.replace("</body>", script)
            frames.append(
                f'<iframe width="{width}" height="900" srcdoc="{html.escape(measured, quote=True)}"></iframe>'
                f'<pre id="out-{frame}"></pre>'
            )
    tmp = tmp_path_factory.mktemp("layout")
    wrapper = tmp / "frames.html"
    wrapper.write_text("<!DOCTYPE html><html><body>" + "".join(frames) + "</body></html>", encoding="utf-8")
    out = run_chromium(
        chromium, tmp, f"--window-size={max(LAYOUT_WIDTHS)},900", "--dump-dom", wrapper.as_uri()
    )
    found = {}
    for m in re.finditer(r'<pre id="out-(\w+)-(\d+)">(.*?)</pre>', out, re.S):
        found[(m.group(1), int(m.group(2)))] = json.loads(html.unescape(m.group(3)))
    assert sorted(found) == sorted((p, w) for p in pages for w in LAYOUT_WIDTHS), out[-2000:]
    return found


@pytest.mark.parametrize("width", LAYOUT_WIDTHS)
@pytest.mark.parametrize("page_name", ["benchmark", "validate", "stress"])
def test_no_page_is_wider_than_the_window_and_no_label_is_clipped(layouts, page_name, width):
    m = layouts[(page_name, width)]
    assert m["innerWidth"] == width
    assert m["scrollWidth"] <= m["clientWidth"] <= m["innerWidth"], m
    assert m["labels"] > 50 and m["clipped"] == [], m["clipped"][:10]


def test_long_names_are_drawn_whole_and_wide_tables_scroll_in_their_section(layouts):
    narrow = layouts[("benchmark", 1280)]
    # Every driver run has its label in the overview's chart (whole: none was reported clipped above).
    assert narrow["ratioLabels"] == len(FLOAT + QUANT + OTHER) * len(DRIVERS)
    # The 8-bit tables are wider than 1280 px: they scroll inside their .table-wrap, not the page.
    assert narrow["scrollingTables"] >= 1 and narrow["scrollWidth"] <= narrow["clientWidth"]

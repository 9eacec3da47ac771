"""report.html uses the screen, checked in headless Chromium at 1366x768 and 1920x1080: the page
takes the viewport's width (no fixed cap), needs no horizontal scrolling (a wide table scrolls
in its own box), the verdict table spans at least 90 % of a 1920 px window and no verdict row
is taller than 3 lines of text there; the forest plot's title names the tested change; a
one-point overlap chart is a sentence; telemetry labels sit beside their lines."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from test_report_html import DevTools, _chromium
from test_report_layout import _trace
import pytest_gemmperf.report as report_pkg
from pytest_gemmperf.report import write_reports
from pytest_gemmperf.report.plots import forest_plot, overlap_scatter
from pytest_gemmperf.report.telemetry import label_rows, telemetry_panel

needs_chromium = pytest.mark.skipif(_chromium() is None, reason="Chromium not installed")

#: a long reason as the gate writes it (gate/confirm.py: a re-run that did not reproduce, the
#: confirmation's change, a disturbed machine), about 300 characters
LONG_REASON = ("not reproduced by the re-run (first look +6.2%, re-run alone +1.1%): transient?; confirmation: "
               "regression -> inconclusive with 9 candidate processes (first look 3); host busy: load 3.4 per "
               "core, another process used 61% of the CPU (was regression, within the x1.25 the contention can "
               "explain; rerun on a quiet machine)")


@pytest.fixture(scope="module")
def wide_report(tmp_path_factory):
    from pytest_gemmperf.gate.compare import compare
    from pytest_gemmperf.gate.samples import samples_from_dispatches

    base, cand = _trace(0, 1.0), _trace(1, 1.3)
    v = compare(samples_from_dispatches(base), samples_from_dispatches(cand),
                test="tests/perf/test_transformer_block.py::test_mlp_gemms_under_allreduce")
    v.loc[v.index[::2], "note"] = LONG_REASON
    out = tmp_path_factory.mktemp("screen")
    return write_reports(out, dispatches=cand, verdicts=v, formats=["html"])["report.html"]


_SCREEN_JS = """
(() => {
  const table = document.getElementById('verdict-table');
  // lines of text a row takes: its content height over the height of one line of its
  // smallest text (a probe in each cell), hidden content (closed details) not counted
  const rows = Array.from(table.tBodies[0].rows).map(r => {
    let line = Infinity;
    for (const c of r.cells) {
      const p = document.createElement('span'); p.textContent = 'x'; c.appendChild(p);
      line = Math.min(line, p.getBoundingClientRect().height); p.remove();
    }
    const cs = getComputedStyle(r.cells[0]);
    const content = r.getBoundingClientRect().height - parseFloat(cs.paddingTop) - parseFloat(cs.paddingBottom)
                    - parseFloat(cs.borderTopWidth) - parseFloat(cs.borderBottomWidth);
    return content / line;
  });
  return {innerWidth: window.innerWidth, scrollWidth: document.documentElement.scrollWidth,
          bodyWidth: document.body.getBoundingClientRect().width,
          tableWidth: table.getBoundingClientRect().width, maxLines: Math.max(...rows), nRows: rows.length,
          boxScrolls: table.parentElement.scrollWidth > table.parentElement.clientWidth};
})()
"""


@needs_chromium
@pytest.mark.parametrize("width, height", [(1366, 768), (1920, 1080)])
def test_the_report_uses_the_screen(tmp_path, wide_report, width, height):
    browser = DevTools(_chromium(), tmp_path / "profile")
    try:
        browser.open(wide_report.resolve().as_uri(), width=width, height=height)
        m = browser.evaluate(_SCREEN_JS)
        browser.screenshot(tmp_path / f"report-{width}.png")
        assert m["innerWidth"] == width
        assert m["scrollWidth"] <= m["innerWidth"], m  # no page-level horizontal scroll
        assert m["bodyWidth"] >= 0.95 * width, m  # no fixed cap on the page's width
        assert m["nRows"] >= 10
        if width == 1920:
            assert m["tableWidth"] >= 0.9 * width, m
            assert m["maxLines"] <= 3.2, m  # 3 lines, with rounding of the box heights
        assert browser.errors() == []
    finally:
        browser.close()


@needs_chromium
def test_a_wide_table_scrolls_in_its_own_box(tmp_path):
    """A verdict table wider than the window (a long unbreakable test id) scrolls inside its
    box; the page itself still does not."""
    from pytest_gemmperf.gate.compare import compare
    from pytest_gemmperf.gate.samples import samples_from_dispatches

    base, cand = _trace(0, 1.0), _trace(1, 1.3)
    v = compare(samples_from_dispatches(base), samples_from_dispatches(cand), test="t" * 600)
    v["note"] = "x" * 900  # one unbreakable word
    html = write_reports(tmp_path / "r", dispatches=cand, verdicts=v, formats=["html"])["report.html"]
    browser = DevTools(_chromium(), tmp_path / "profile")
    try:
        browser.open(html.resolve().as_uri(), width=1366, height=768)
        m = browser.evaluate(_SCREEN_JS)
        assert m["scrollWidth"] <= m["innerWidth"] and m["boxScrolls"], m
    finally:
        browser.close()


def test_the_forest_plot_names_the_tested_change() -> None:
    v = pd.DataFrame({"metric": ["dur_ns"], "kernel": ["k"], "ratio": [1.2], "ci_low": [1.1], "ci_high": [1.3],
                      "threshold": [0.05], "verdict": ["regression"], "point": ["p"]})
    svg = str(forest_plot(v))
    assert "tested change" in svg and "median duration" not in svg
    template = (Path(report_pkg.__file__).parent / "templates" / "report.html.j2").read_text(encoding="utf-8")
    assert "ratio of medians" not in template and "Tested change per kernel" in template


def test_one_overlap_point_is_a_sentence() -> None:
    one = pd.DataFrame({"label": ["run"], "kernel": ["Cijk_<gemm>"], "count": [40], "mean_overlap_fraction": [0.0],
                        "median_dur_us": [20.7], "interference_slowdown": [np.nan]})
    text = str(overlap_scatter(one))
    assert "<svg" not in text and "One GEMM kernel" in text and "never overlapping" in text
    assert "Cijk_&lt;gemm&gt;" in text  # escaped
    two = pd.concat([one, one.assign(kernel="other", mean_overlap_fraction=0.4)], ignore_index=True)
    assert "<svg" in str(overlap_scatter(two))


def test_telemetry_labels_sit_beside_their_lines() -> None:
    # two devices ending at the same value: labels apart, both right of the plot
    moved = label_rows([(50.0, "gpu0", "#1"), (50.0, "gpu1", "#2"), (120.0, "gpu2", "#3")], 30.0, 120.0)
    ys = [y for y, _, _ in moved]
    assert all(b - a >= 11 for a, b in zip(ys, ys[1:])) and max(ys) <= 120.0
    t = np.arange(0, 2_000_000_000, 100_000_000)
    samples = pd.DataFrame({"device": np.repeat(["gpu0", "gpu1"], len(t)), "time_ns": np.tile(t, 2),
                            "metric": "gfx_clock_mhz", "value": 2100.0})
    svg = str(telemetry_panel(samples, None, "t[p]", width=900))
    xs_line = [float(x) for pts in re.findall(r'points="([^"]+)"', svg) for x in re.findall(r"([\d.]+),", pts)]
    labels = re.findall(r'<text x="([\d.]+)" y="[\d.]+" text-anchor="start" fill="[^"]+">(gpu\d)</text>', svg)
    assert {name for _, name in labels} == {"gpu0", "gpu1"}
    assert all(float(x) > max(xs_line) for x, _ in labels)  # right of every line's end

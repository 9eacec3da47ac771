"""report.html reads at a glance (issue 12, item 7), checked in headless Chromium at 1366x768.

* the verdict, short kernel name, ratio [CI] and q cells of the first rows lie inside the
  window, and the page needs no horizontal scrolling;
* every kernel shown on the page (tables, box-plot titles, forest-plot labels) has one
  label, distinct from the labels of the other kernels;
* the full name is reachable: tooltip, expandable cell, copy button;
* optional verdict columns whose every value is empty are not shown.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from test_report_html import DevTools, _chromium, _real_908_report
from pytest_gemmperf.report import write_reports
from pytest_gemmperf.traces.schema import finalize_dispatches

WIDTH, HEIGHT = 1366, 768

# hipBLASLt/Tensile names of the real 908 trace (data-catalog 1.1) that differ only in the
# middle: elided in the middle, all three used to read the same
_TAIL = ("_MI16x16x1_SN_LDSB1_AFC0_AFEM1_AFEM1_ASEM1_CLR1_CADS0_DTLA0_DTLB0_DTVA0_DTVB0_EPS0_FDSI0_"
         "GRPM1_GRVWA8_GRVWB8_GSU0_GSUAMB_GLS0_ISA950_IU1_K1_LDSTI0_LBSPPA1024_LBSPPB512_LBSPPM0_LPA32_"
         "LPB16_LPM0_LRVW8_LWPMn1_MIAV0_MIWT2_1_MO40_NTn1_NTA0_NTB0_NTC0_NTD0_NTM0_NEPBS0_NLCA1_NLCB1_"
         "ONLL1_PGR2_PLR1_PKA1_SIA3_SS1_SPO0_SRVW0_SSO0_SVW2_SK3_SKFTR0_SKXCCM0_TLDS1_ULSGRO0_USL1_"
         "UIOFGRO0_USFGRO0_VSn1_VWA2_VWB1_WSGRA0_WSGRB0_WS64_WG32_8_1")
GEMMS = [f"Cijk_Ailk_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_{mt}{_TAIL}"
         for mt in ("MT64x32x256", "MT64x48x256", "MT64x64x256", "MT64x16x256", "MT32x16x128")]
OTHERS = [
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, "
    "float>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, "
    "float>, unsigned int, float, 4, 4>)",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::NormTwoOps<float, float, "
    "float>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float, at::native::NormTwoOps<float, float, float>, "
    "unsigned int, float, 4, 4>)",
    'void ck::kernel_gemm<ck::Op<float, "q">, 256, &foo::bar>(int*, a<b && c>d)',
    "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)",
]
SLOW = set(GEMMS[:4])


def _trace(seed: int, factor: float) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for point in ("ch28-th256", "ch56-th256"):
        for run in range(3):
            t = 1_000_000
            for _ in range(40):
                for i, name in enumerate(GEMMS + OTHERS):
                    d = int((8_000 + 1_000 * i) * (factor if name in SLOW else 1.0) * rng.lognormal(0, 0.03))
                    rows.append((point, 0, run, name, t, t + d, 1))
                    t += d + 400
    df = pd.DataFrame(rows, columns=["point", "rank", "run", "kernel", "start_ns", "end_ns", "queue"])
    df["host"] = "h"
    df["pid"] = 100 + df["run"]
    df["source"] = "rocprofv3-json"
    return finalize_dispatches(df, "synthetic")


@pytest.fixture(scope="module")
def synthetic_report(tmp_path_factory):
    from pytest_gemmperf.gate.compare import compare
    from pytest_gemmperf.gate.samples import samples_from_dispatches

    base, cand = _trace(0, 1.0), _trace(1, 1.3)
    v = compare(samples_from_dispatches(base), samples_from_dispatches(cand), test="tests/test_gemm.py::test_mlp")
    assert (v["verdict"] == "regression").sum() >= 5, "fixture lost its regressions"
    out = tmp_path_factory.mktemp("layout")
    return write_reports(out, dispatches=cand, verdicts=v, formats=["html"])["report.html"]


def _click(browser: DevTools, element_js: str) -> None:
    """A trusted mouse click (DevTools Input domain) at the centre of the element."""
    x, y = browser.evaluate(f"(() => {{ const r = {element_js}.getBoundingClientRect();"
                            " return [r.left + r.width / 2, r.top + r.height / 2]; })()")
    for kind in ("mousePressed", "mouseReleased"):
        browser.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1})


needs_chromium = pytest.mark.skipif(_chromium() is None, reason="Chromium not installed (Debian package "
                                                                "'chromium'; installed by .ci/run)")

# per row of the verdict table: right edges of the key cells, the kernel cell, the row height
_KEY_CELLS_JS = """
(() => {
  const table = document.getElementById('verdict-table');
  const heads = Array.from(table.tHead.rows[0].cells).map(th => th.innerText.trim());
  const col = name => heads.findIndex(h => h.startsWith(name));
  const idx = {verdict: col('verdict'), kernel: col('kernel'), ratio: col('change [95% CI]'), q: heads.indexOf('q')};
  const box = table.parentElement.getBoundingClientRect();
  const rows = Array.from(table.tBodies[0].rows).slice(0, 5).map(r => {
    // lines of text an element's content takes (distinct tops of its line boxes)
    const lines = el => { const g = document.createRange(); g.selectNodeContents(el);
                          return new Set(Array.from(g.getClientRects()).map(x => Math.round(x.top))).size; };
    const out = {kernel_lines: lines(r.cells[idx.kernel].querySelector('summary')),
                 ratio_lines: lines(r.cells[idx.ratio]), verdict_attr: r.getAttribute('data-verdict')};
    for (const [k, i] of Object.entries(idx)) {
      const rect = r.cells[i].getBoundingClientRect();
      out[k] = {right: rect.right, left: rect.left, text: r.cells[i].innerText.trim()};
    }
    return out;
  });
  return {heads, idx, rows, boxRight: box.right, innerWidth: window.innerWidth,
          scrollWidth: document.documentElement.scrollWidth, scrollX: window.scrollX};
})()
"""

# every kernel shown: (where, label, full name)
_LABELS_JS = """
(() => {
  const out = [];
  document.querySelectorAll('td.k').forEach(td => {
    out.push({where: td.closest('table').id, label: td.querySelector('summary').innerText.trim(),
              full: td.title, code: td.querySelector('code.full').textContent,
              copy: td.querySelector('button.copy').getAttribute('data-copy')});
  });
  document.querySelectorAll('svg text.kernel-title, svg text.kernel-label').forEach(t => {
    // forest rows: "sweep point <tspan class=name>label</tspan>", tooltip "sweep point full"
    const tip = t.querySelector('title');
    const name = t.querySelector('tspan.name');
    const prefix = name ? t.textContent.slice(0, t.textContent.indexOf(name.textContent)) : '';
    const label = name ? name.textContent
                       : Array.from(t.childNodes).filter(n => n.nodeType === 3).map(n => n.textContent).join('');
    const full = tip ? tip.textContent : null;
    out.push({where: t.closest('section').id + '-svg', label: label.trim(),
              full: full && full.startsWith(prefix) ? full.slice(prefix.length) : full, code: null, copy: null});
  });
  return out;
})()
"""


def _check_page(browser: DevTools, *, min_rows: int = 5) -> dict:
    layout = browser.evaluate(_KEY_CELLS_JS)
    assert all(i >= 0 for i in layout["idx"].values()), layout["heads"]
    # key columns first: verdict, kernel, metric, ratio [CI], q (sweep before them when several)
    assert layout["idx"]["verdict"] < layout["idx"]["kernel"] < layout["idx"]["ratio"] < layout["idx"]["q"] <= 5
    rows = layout["rows"]
    assert len(rows) >= min(min_rows, 5)
    limit = min(layout["innerWidth"], layout["boxRight"])
    assert layout["innerWidth"] == WIDTH
    for r in rows:
        for key in ("verdict", "kernel", "ratio", "q"):
            assert 0 <= r[key]["left"] and r[key]["right"] <= limit, (key, r[key], limit)
        assert r["verdict"]["text"] == r["verdict_attr"]
        assert "[" in r["ratio"]["text"] and "]" in r["ratio"]["text"]
        # one line each: the short name and the ratio [CI] do not wrap into tall cells
        assert r["kernel_lines"] == 1 and r["ratio_lines"] == 1, r
    # the page itself needs no horizontal scrolling
    assert layout["scrollWidth"] <= layout["innerWidth"], layout["scrollWidth"]

    labels = browser.evaluate(_LABELS_JS)
    assert labels
    by_label: dict[str, set[str]] = {}
    by_full: dict[str, set[str]] = {}
    for e in labels:
        assert e["full"], e  # every label carries its full name
        assert e["label"] and len(e["label"]) <= 48, e
        if e["code"] is not None:
            assert e["code"] == e["full"] == e["copy"], e
        by_label.setdefault(e["label"], set()).add(e["full"])
        by_full.setdefault(e["full"], set()).add(e["label"])
    shared = {k: v for k, v in by_label.items() if len(v) > 1}
    assert not shared, f"labels shared by different kernels: {shared}"
    assert all(len(v) == 1 for v in by_full.values()), "one kernel under two labels"
    return {"layout": layout, "labels": labels}


@needs_chromium
def test_synthetic_tensile_report_reads_at_a_glance(tmp_path, synthetic_report):
    browser = DevTools(_chromium(), tmp_path / "profile")
    try:
        browser.open(synthetic_report.resolve().as_uri(), width=WIDTH, height=HEIGHT)
        res = _check_page(browser)
        rows = res["layout"]["rows"]
        assert [r["verdict_attr"] for r in rows] == ["regression"] * 5
        shown = {r["kernel"]["text"].replace("copy", "").strip() for r in rows}
        # distinct short names of the GEMMs that elided alike: head + macro tile
        assert {"Cijk_Ailk_Bljk_BBS_MT64x32x256", "Cijk_Ailk_Bljk_BBS_MT64x48x256"} <= shown | {
            e["label"] for e in res["labels"]}
        # point and test have values here, so their columns are shown (after the key columns)
        heads = res["layout"]["heads"]
        assert "point" in heads and "test" in heads and heads.index("point") > heads.index("q")
        # box-plot titles are the short names (full name in the SVG <title>)
        titles = [e for e in res["labels"] if e["where"] == "distributions-svg"]
        assert titles and all(e["label"].startswith("Cijk_") for e in titles if e["full"] in GEMMS)
        # expand: the full name shows up; copy: the button reports success
        first = "document.querySelector('#verdict-table td.k')"
        full = browser.evaluate(f"{first}.title")
        assert full not in browser.evaluate("document.body.innerText")
        browser.evaluate(f"{first}.querySelector('summary').click()")
        assert full in browser.evaluate("document.body.innerText")
        browser.evaluate(f"{first}.querySelector('summary').click()")
        # copy with a real (trusted) click and clipboard permission: the clipboard holds the name
        browser.send("Browser.grantPermissions", {"permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]},
                     session=False)
        _click(browser, f"{first}.querySelector('button.copy')")
        browser.evaluate("new Promise(r => setTimeout(r, 300))")
        assert browser.evaluate(f"{first}.querySelector('button.copy').className") == "copy copied"
        assert browser.evaluate("navigator.clipboard.readText()") == full
        # without clipboard access (untrusted click, no permission): the name is shown selected
        second = "document.querySelectorAll('#verdict-table td.k')[1]"
        browser.send("Browser.resetPermissions", session=False)
        browser.evaluate(f"{second}.querySelector('button.copy').click()")
        browser.evaluate("new Promise(r => setTimeout(r, 300))")
        if browser.evaluate(f"{second}.querySelector('button.copy').className") == "copy":
            assert browser.evaluate(f"{second}.querySelector('details').open")
            assert browser.evaluate("window.getSelection().toString()") == browser.evaluate(f"{second}.title")
        assert browser.errors() == []
    finally:
        browser.close()


@needs_chromium
def test_nway_report_keeps_key_columns_in_view(tmp_path):
    """Several candidate sweeps: the sweep column comes first, the key columns still fit."""
    from pytest_gemmperf.gate.compare import compare
    from pytest_gemmperf.gate.samples import samples_from_dispatches

    base, c1, c2 = _trace(0, 1.0), _trace(1, 1.3), _trace(2, 1.0)
    sb = samples_from_dispatches(base)
    v = pd.concat([compare(sb, samples_from_dispatches(c), test="tests/test_gemm.py::test_mlp").assign(label=lab)
                   for lab, c in (("candidate-a", c1), ("candidate-b", c2))], ignore_index=True)
    html = write_reports(tmp_path / "rep", dispatches=[base, c1, c2], labels=["base", "candidate-a", "candidate-b"],
                         verdicts=v, formats=["html"])["report.html"]
    browser = DevTools(_chromium(), tmp_path / "profile")
    try:
        browser.open(html.resolve().as_uri(), width=WIDTH, height=HEIGHT)
        res = _check_page(browser)
        assert res["layout"]["heads"][0] == "sweep"
        assert browser.errors() == []
    finally:
        browser.close()


@pytest.mark.slow  # the real 43,915-dispatch trace
@needs_chromium
def test_real_908_report_reads_at_a_glance(tmp_path, shared_data):
    html_path, slow = _real_908_report(tmp_path / "report")
    browser = DevTools(_chromium(), tmp_path / "profile")
    try:
        browser.open(html_path.resolve().as_uri(), width=WIDTH, height=HEIGHT)
        res = _check_page(browser)
        heads = res["layout"]["heads"]
        # the 908 comparison has no sweep points: the empty point column is hidden
        assert "point" not in heads
        labels = {e["full"]: e["label"] for e in res["labels"]}
        assert labels[slow].startswith("reduce_kernel<")
        gemm = {v for k, v in labels.items() if k.startswith("Cijk_")}
        assert len(gemm) >= 5 and all("_MT" in g for g in gemm)
        shot = Path(os.environ.get("GEMMPERF_SCREENSHOT_DIR", tmp_path)) / "report_908_1366.png"
        browser.screenshot(shot)
        assert shot.stat().st_size > 10_000
        assert browser.errors() == []
    finally:
        browser.close()


def test_optional_columns_hidden_when_empty():
    from pytest_gemmperf.report.html import visible_columns

    rows = [{"test": "", "point": "-", "note": None}, {"test": "t", "point": "", "note": float("nan")}]
    assert visible_columns(rows) == {"test"}
    assert visible_columns([]) == set()


def test_page_labels_escape_and_stay_distinct(synthetic_report):
    html = synthetic_report.read_text(encoding="utf-8")
    # autoescaping kept: the C++ name with <, >, & and quotes appears only escaped
    assert 'ck::kernel_gemm<ck::Op<float, "q">' not in html
    assert "ck::kernel_gemm&lt;ck::Op&lt;float, &#34;q&#34;&gt;" in html

"""history.html and history.xlsx: numbers, ordering, escaping, size, and the page in Chromium.

Fixtures build a history table (history.store.HISTORY_COLUMNS) with known per-process values
and level shifts, and the matching change table (history.changepoints.CHANGE_COLUMNS), so the
expected medians, levels and markers are known exactly. The real-data test runs the real 908
trace through gate samples -> history values -> the history store -> change detection -> page.
"""

from __future__ import annotations

import html as html_lib
import itertools
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.report.history_page import (history_sheet_table, render_history_page, trend_table,
                                                 write_history_page, write_history_reports)
from test_report_html import FORMULA, NASTY, XSS, DevTools, _chromium, _Collect

TEST = "perf_tests/test_gemm.py::test_gemm"
T0 = pd.Timestamp("2026-10-01T08:00:00Z")


def make_history(kernels, *, metrics=("dur_ns",), points=("ch28-th256",), n_runs=12, units=4,
                 hw_key="mi300x", shifts=None, seed=0, noise=0.01) -> pd.DataFrame:
    """Runs one hour apart; unit u of every run has value base * (1 + 0.01 u) * noise;
    ``shifts[(kernel, metric, point)] = (first run after, factor)`` multiplies from that run on."""
    shifts = shifts or {}
    rng = np.random.default_rng(seed)
    grid = np.array(list(itertools.product(range(n_runs), range(len(points)), range(len(kernels)),
                                           range(len(metrics)), range(units))))
    r, p, k, m, u = grid.T
    kern = np.array(kernels, dtype=object)[k]
    met = np.array(metrics, dtype=object)[m]
    pt = np.array(points, dtype=object)[p]
    base = np.where(met == "overlap_fraction", 0.6, 1000.0 * (k + 1) * (1 + p))
    fac = np.ones(len(grid))
    for (kk, mm, pp), (at, f) in shifts.items():
        fac[(kern == kk) & (met == mm) & (pt == pp) & (r >= at)] *= f
    value = base * fac * (1 + 0.01 * u) * (rng.lognormal(0, noise, len(grid)) if noise else 1.0)
    return pd.DataFrame({
        "run_id": [f"{hw_key}-run{x:03d}" for x in r], "time": T0 + pd.to_timedelta(r, "h"),
        "commit": [f"{x:040x}" for x in r * 7919 + 12345], "branch": "main", "hw_key": hw_key, "test": TEST,
        "point": pt, "kernel": kern, "metric": met, "unit": [f"h/{100 + x}/0/0" for x in u], "value": value})


def make_changes(history: pd.DataFrame, shifts) -> pd.DataFrame:
    runs = history.drop_duplicates("run_id").sort_values("time").reset_index(drop=True)
    rows = []
    for (kern, met, pt), (at, f) in shifts.items():
        worse = f < 1 if met == "overlap_fraction" else f > 1
        rows.append({"test": TEST, "point": pt, "kernel": kern, "metric": met,
                     "run_before": runs["run_id"][at - 1], "run_after": runs["run_id"][at],
                     "time_after": runs["time"][at], "commit_after": runs["commit"][at], "ratio": f,
                     "ci_low": f * 0.98, "ci_high": f * 1.02, "q_value": 1e-4,
                     "direction": "regression" if worse else "improvement"})
    return pd.DataFrame(rows)


KERNELS = [NASTY, XSS, FORMULA, "Cijk_Ailk_Bljk_HHS_BH_MT128x128x64_MI32x32x8"]
SHIFTS = {(NASTY, "dur_ns", "ch28-th256"): (6, 1.25), (XSS, "overlap_fraction", "ch56-th512"): (9, 0.8)}


@pytest.fixture(scope="module")
def small():
    h = make_history(KERNELS, metrics=("dur_ns", "overlap_fraction"), points=("ch28-th256", "ch56-th512"),
                     shifts=SHIFTS)
    return h, make_changes(h, SHIFTS)


# ---------------------------------------------------------------------------------------------
# numbers


def test_trend_table_is_per_run_process_statistics():
    h = make_history(["k"], n_runs=3, units=5, noise=0.0)
    # shuffled rows, and run ids whose text order is not their time order
    h["run_id"] = h["run_id"].map({"mi300x-run000": "c", "mi300x-run001": "b", "mi300x-run002": "a"})
    t = trend_table(h.sample(frac=1.0, random_state=1))
    assert list(t["run_id"]) == ["c", "b", "a"] and list(t["run_index"]) == [0, 1, 2]
    vals = 1000.0 * (1 + 0.01 * np.arange(5))
    row = t.iloc[0]
    assert row["n_units"] == 5
    assert row["median"] == pytest.approx(np.median(vals))
    assert (row["q1"], row["q3"]) == pytest.approx((np.quantile(vals, 0.25), np.quantile(vals, 0.75)))
    assert (row["min"], row["max"]) == pytest.approx((vals.min(), vals.max()))


def test_series_never_mix_hardware():
    a = make_history(["k"], n_runs=4, hw_key="mi300x")
    b = make_history(["k"], n_runs=3, hw_key="mi355x").assign(value=lambda d: d["value"] * 3)
    t = trend_table(pd.concat([a, b]))
    assert t.groupby("hw_key").size().to_dict() == {"mi300x": 4, "mi355x": 3}
    assert t.groupby("hw_key")["run_index"].max().to_dict() == {"mi300x": 3, "mi355x": 2}


def test_sheet_levels_changes_and_units(small):
    h, c = small
    s = history_sheet_table(h, c)
    one = s[(s["kernel"] == NASTY) & (s["metric"] == "dur_ns") & (s["point"] == "ch28-th256")]
    assert len(one) == 12 and set(one["value_unit"]) == {"µs"}
    # µs, and the level of each stretch is the median of its run medians
    assert one["median"].iloc[0] == pytest.approx(trend_table(h).query(
        "kernel == @NASTY and metric == 'dur_ns' and point == 'ch28-th256'")["median"].iloc[0] / 1e3)
    before, after = one["level"].iloc[0], one["level"].iloc[-1]
    assert after / before == pytest.approx(1.25, rel=0.01)
    assert before == pytest.approx(one["median"].iloc[:6].median())
    marked = one[one["change_direction"].notna()]
    assert list(marked["run_index"]) == [6] and marked["change_ratio"].iloc[0] == 1.25
    frac = s[(s["kernel"] == XSS) & (s["metric"] == "overlap_fraction") & (s["point"] == "ch56-th512")]
    assert set(frac["value_unit"]) == {"fraction"} and frac["median"].iloc[0] == pytest.approx(0.6, rel=0.05)
    # a 20 % fall of a higher-is-better metric is a regression
    assert frac.loc[frac["change_direction"].notna(), "change_direction"].tolist() == ["regression"]


def test_direction_derived_like_the_gate_when_absent(small):
    h, c = small
    html = render_history_page(h, c.drop(columns=["direction"]))
    # overlap_fraction is higher-is-better: its fall of 20 % is a regression, the +25 % duration too
    assert html.count('<tr class="flt regression"') == 2
    assert ">2 regressions</b>" in html and ">0 improvements</b>" in html


def test_bad_input_is_one_line():
    h = make_history(["k"], n_runs=2)
    with pytest.raises(GemmperfInputError, match=r"^history: not a history table \(lacks unit\)$"):
        render_history_page(h.drop(columns="unit"), None)
    with pytest.raises(GemmperfInputError, match="history holds no values"):
        render_history_page(h.iloc[0:0], None)
    with pytest.raises(GemmperfInputError, match="'time' is not a timestamp"):
        render_history_page(h.assign(time="yesterday-ish"), None)
    with pytest.raises(GemmperfInputError, match="has several times or hardware keys"):
        render_history_page(h.assign(hw_key=["a", "b"] * (len(h) // 2)), None)
    bad = make_changes(h, {("k", "dur_ns", "ch28-th256"): (1, 1.1)}).assign(ratio=-1.0)
    with pytest.raises(GemmperfInputError, match=r"^changes: row 0 \(k, dur_ns\): ratio -1.0 is not a positive"):
        render_history_page(h, bad)
    with pytest.raises(GemmperfInputError, match=r"^changes: not a change-point table \(lacks run_after\)"):
        render_history_page(h, bad.drop(columns="run_after"))
    with pytest.raises(GemmperfInputError, match="expected a DataFrame, got str"):
        render_history_page("not a frame", None)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# page


def test_page_is_self_contained_and_escaped(small, tmp_path):
    h, c = small
    path = write_history_page(h, c, tmp_path)
    assert path == tmp_path / "history.html"
    html = path.read_text(encoding="utf-8")
    parser = _Collect()  # raises on any src/href that is not a fragment
    parser.feed(html)
    assert parser.tags.count("script") == 1
    assert XSS not in html and "&lt;script&gt;alert(1)&lt;/script&gt;_gemm" in html
    assert NASTY in "".join(parser.text)
    assert "Content-Security-Policy" in html and "default-src 'none'" in html
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", html.replace('http://x', ''))
    assert html.count('<svg xmlns="http://www.w3.org/2000/svg" class="trend"') == 16
    # both change points drawn, on the right series, with their signed change
    marks = re.findall(r'<figure class="series flt" id="(s\d+)"[^>]*data-changed="1">.*?</figure>', html, re.S)
    assert len(marks) == 2
    # the fall of overlap (higher is better) is a regression, like the duration rise
    assert html.count('<g class="cp regression"') == 2 and html.count('<g class="cp improvement"') == 0
    assert ">+25.0%</text>" in html and ">-20.0%</text>" in html


def test_direction_oriented_like_gate_in_page(small):
    h, c = small
    html = render_history_page(h, c)
    # the two series with changes are charted first: the regression, then the improvement
    first = re.findall(r'<figure class="series flt" id="s\d+" data-test="[^"]*" data-point="([^"]*)" '
                       r'data-metric="([^"]*)"', html)[:2]
    assert first == [("ch28-th256", "dur_ns"), ("ch56-th512", "overlap_fraction")]


@pytest.mark.slow  # a 40-run, 80-kernel history
def test_cap_order_size_and_speed_80_kernels_4_metrics_40_runs(tmp_path):
    kernels = [f"void ck::gemm_kernel<ck::Tile<{i}, 128, 64>, float&, std::array<char*, 2ul> >(int)" for i in range(80)]
    metrics = ("dur_ns", "overlap_fraction", "category_total_ns:gemm", "exposed_comm_ns")
    shifts = {(kernels[3], "dur_ns", "ch28-th256"): (30, 1.10), (kernels[7], "dur_ns", "ch28-th256"): (38, 1.40),
              (kernels[9], "overlap_fraction", "ch28-th256"): (20, 1.3),
              (kernels[11], "exposed_comm_ns", "ch28-th256"): (10, 0.7)}
    h = make_history(kernels, metrics=metrics, n_runs=40, shifts=shifts)
    c = make_changes(h, shifts)
    t0 = time.perf_counter()
    files = write_history_reports(h, c, tmp_path)
    elapsed = time.perf_counter() - t0
    html = files["history.html"].read_text(encoding="utf-8")
    size = files["history.html"].stat().st_size
    print(f"\n320 series x 40 runs x 4 processes: history.html {size / 1e6:.2f} MB, "
          f"history.xlsx {files['history.xlsx'].stat().st_size / 1e6:.2f} MB, {elapsed:.1f} s")
    assert size < 3_000_000
    assert html.count('class="trend"') == 60
    assert "60 of 320 series charted" in html and "Series not charted (260)" in html
    ids = re.findall(r'<figure class="series flt" id="s\d+"[^>]*data-metric="([^"]*)"[^>]*>\s*<figcaption>'
                     r'<details class="kn"><summary title="([^"]*)"', html)
    # regressions by size (+40 % before +10 %), then improvements by size (-30 % before +30 %:
    # |log 0.7| > |log 1.3|; overlap is higher-is-better, so its rise is an improvement)
    assert [(m, html_lib.unescape(k)) for m, k in ids[:4]] == [
        ("dur_ns", kernels[7]), ("dur_ns", kernels[3]), ("exposed_comm_ns", kernels[11]),
        ("overlap_fraction", kernels[9])]
    # change table: regressions first, most recent first
    table = html[html.index('id="change-table"'):html.index("</table>", html.index('id="change-table"'))]
    dirs = re.findall(r'<tr class="flt (\w+)"', table)
    assert dirs == ["regression", "regression", "improvement", "improvement"]
    assert table.index("+40.0%") < table.index("+10.0%") < table.index("+30.0%") < table.index("-30.0%")
    # short names are distinct and the full names are on the page
    shorts = re.findall(r'<summary title="[^"]*">([^<]*)</summary>', html)
    assert len(set(shorts)) >= 60
    assert all(len(s) <= 48 for s in shorts)


def test_xlsx_keeps_text_and_numbers(small, tmp_path):
    h, c = small
    path = write_history_reports(h, c, tmp_path)["history.xlsx"]
    from openpyxl import load_workbook

    wb = load_workbook(path)
    assert wb.sheetnames == ["history", "history_changes"]
    ws = wb["history"]
    header = [cell.value for cell in ws[2]]
    assert header[:6] == ["hw_key", "test", "point", "kernel", "metric", "run_id"]
    kernels = {row[3] for row in ws.iter_rows(min_row=3, values_only=True)}
    assert FORMULA in kernels and NASTY in kernels  # text, not a formula
    cell_types = {ws.cell(row=r, column=4).data_type for r in range(3, ws.max_row + 1)}
    assert cell_types == {"s"}
    df = pd.read_excel(path, sheet_name="history", header=1)
    expect = history_sheet_table(h, c)
    assert len(df) == len(expect)
    jm = [i for i, v in enumerate(header) if str(v).startswith("median")][0]
    # written at 12 significant digits (numbers.py): no binary noise, within 5e-12 relative
    assert df.iloc[:, jm].to_numpy() == pytest.approx(expect["median"].to_numpy(), rel=1e-11)
    ch = pd.read_excel(path, sheet_name="history_changes", header=1)
    assert len(ch) == 2 and set(ch["direction"]) == {"regression"}


def test_reports_link_back_to_an_existing_report(small, tmp_path):
    h, c = small
    (tmp_path / "report.html").write_text("<html></html>", encoding="utf-8")
    html = write_history_reports(h, c, tmp_path)["history.html"].read_text(encoding="utf-8")
    assert '<a href="report.html">' in html
    html2 = render_history_page(h, c)
    assert 'href="report.html"' not in html2


def test_unmatched_change_is_listed_not_charted(small):
    h, c = small
    extra = c.iloc[[0]].assign(run_after="no-such-run", kernel="other")
    html = render_history_page(h, pd.concat([c, extra], ignore_index=True))
    assert "1 change point names a run or series this history does not hold" in html
    assert html.count('<g class="cp ') == 2 and html.count('<tr class="flt regression"') == 3
    row = re.search(r'<tr class="flt regression"[^>]*>(?:(?!</tr>).)*<summary title="other">.*?</tr>', html, re.S)
    assert row and row.group(0).endswith("<td>–</td>\n</tr>")


# ---------------------------------------------------------------------------------------------
# Chromium


def _open_with_network_log(browser: DevTools, url: str, width: int = 1400) -> None:
    """DevTools.open with the Network domain enabled before navigation, so every request the
    page makes (there must be none but the page itself) is recorded."""
    target = browser.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
    browser.session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                   session=False)["sessionId"]
    for domain in ("Page.enable", "Runtime.enable", "Log.enable", "Network.enable"):
        browser.send(domain)
    browser.send("Emulation.setDeviceMetricsOverride",
                 {"width": width, "height": 1000, "deviceScaleFactor": 1, "mobile": False})
    browser.send("Page.navigate", {"url": url})
    browser.wait_event("Page.loadEventFired")


@pytest.mark.skipif(_chromium() is None, reason="Chromium not installed (Debian package 'chromium'; "
                                                "installed by .ci/run)")
@pytest.mark.slow  # a real browser: in `pytest tests`, not the inner loop
def test_history_page_in_headless_chromium(tmp_path):
    kernels = [NASTY, XSS, FORMULA] + [f"Cijk_Ailk_Bljk_HHS_BH_MT{64 * (i + 1)}x128x64_MI32x32x8" for i in range(9)]
    shifts = {(NASTY, "dur_ns", "ch28-th256"): (14, 1.3), (kernels[5], "dur_ns", "ch56-th256"): (8, 0.75),
              (XSS, "overlap_fraction", "ch28-th256"): (20, 0.85)}
    h = make_history(kernels, metrics=("dur_ns", "overlap_fraction"), points=("ch28-th256", "ch56-th256"),
                     n_runs=24, shifts=shifts)
    c = make_changes(h, shifts)
    path = write_history_reports(h, c, tmp_path / "out", max_charts=30)["history.html"]
    url = path.resolve().as_uri()
    browser = DevTools(_chromium(), tmp_path / "profile")
    try:
        _open_with_network_log(browser, url)
        ev = browser.evaluate
        # charts render: 30 SVGs with a laid-out size and a median line of 24 runs each
        assert ev("document.querySelectorAll('figure.series svg.trend').length") == 30
        sizes = ev("Array.from(document.querySelectorAll('svg.trend')).map(s => s.getBoundingClientRect().width)")
        assert min(sizes) > 300
        assert ev("Array.from(document.querySelectorAll('svg.trend polyline.median'))"
                  ".every(p => p.points.numberOfItems === 24)")
        # change points: markers on exactly the three series that have one
        per = ev("Array.from(document.querySelectorAll('figure.series')).map(f => "
                 "[f.getAttribute('data-changed'), f.querySelectorAll('g.cp').length])")
        assert sorted(n for flag, n in per if flag == "1") == [1, 1, 1]
        assert all(n == 0 for flag, n in per if flag == "0")
        assert ev("document.querySelectorAll('g.cp.regression').length") == 2
        assert ev("document.querySelectorAll('g.cp.improvement').length") == 1
        labels = ev("Array.from(document.querySelectorAll('g.cp text')).map(t => t.textContent)")
        assert sorted(labels) == ["+30.0%", "-15.0%", "-25.0%"]
        assert ev("document.querySelector('g.cp line').getBoundingClientRect().height") > 100
        # hover text of a run: id, commit, median, process count
        tip = ev("document.querySelector('figure.series rect.hit title').textContent")
        assert "run mi300x-run000" in tip and "commit 0000000000" in tip and "over 4 processes" in tip
        # the kernel name with <, > and & renders as text, its full form one click away
        assert NASTY in ev("document.body.innerText") or NASTY in ev(
            "Array.from(document.querySelectorAll('details.kn code')).map(c => c.textContent).join('\\n')")
        assert ev("document.querySelectorAll('script').length") == 1
        # filters: the visible charts are exactly those matching (checked on every figure)
        figs = "Array.from(document.querySelectorAll('figure.series'))"
        visible = f"{figs}.filter(f => !f.hidden).length"
        ev("var f = document.getElementById('f-kernel'); f.value = 'ck::kernel_gemm'; f.dispatchEvent(new Event('input'));")
        ok = ev(f"{figs}.every(f => f.hidden === (f.querySelector('code').textContent.indexOf('ck::kernel_gemm') < 0))")
        n_kernel = ev(visible)
        assert ok and 1 <= n_kernel < 30
        assert ev("document.getElementById('f-count').textContent") == f"{n_kernel} of 30 charts shown"
        ev("var s = document.getElementById('f-metric'); s.value = 'dur_ns'; s.dispatchEvent(new Event('change'));")
        assert ev(f"{figs}.every(f => f.hidden === (f.querySelector('code').textContent.indexOf('ck::kernel_gemm') < 0"
                  " || f.getAttribute('data-metric') !== 'dur_ns'))")
        assert 1 <= ev(visible) < n_kernel
        ev("var f = document.getElementById('f-kernel'); f.value = ''; f.dispatchEvent(new Event('input'));"
           "var s = document.getElementById('f-metric'); s.value = ''; s.dispatchEvent(new Event('change'));"
           "var p = document.getElementById('f-point'); p.value = 'ch56'; p.dispatchEvent(new Event('input'));")
        assert ev(f"{figs}.every(f => f.hidden === (f.getAttribute('data-point') !== 'ch56-th256'))")
        assert 1 <= ev(visible) < 30
        ev("var p = document.getElementById('f-point'); p.value = ''; p.dispatchEvent(new Event('input'));"
           "var k = document.getElementById('f-changed'); k.checked = true; k.dispatchEvent(new Event('change'));")
        assert ev(visible) == 3
        assert ev("Array.from(document.querySelectorAll('#change-table tbody tr')).filter(r => !r.hidden).length") == 3
        ev("var k = document.getElementById('f-changed'); k.checked = false; k.dispatchEvent(new Event('change'));")
        assert ev(visible) == 30
        # change table: regressions first, newest first; sortable by change
        rows = "Array.from(document.querySelectorAll('#change-table tbody tr'))"
        assert ev(f"{rows}.map(r => r.cells[1].textContent)") == ["-15.0%", "+30.0%", "-25.0%"]
        ev("document.querySelectorAll('#change-table thead th')[1].querySelector('button').click()")
        assert ev(f"{rows}.map(r => r.cells[1].textContent)") == ["-25.0%", "-15.0%", "+30.0%"]
        # copy button: selects or copies the full name without an error
        ev("document.querySelector('details.kn').open = true; document.querySelector('details.kn button.copy').click()")
        time.sleep(0.3)
        shot = tmp_path / "history.png"
        browser.screenshot(shot)
        assert shot.stat().st_size > 10_000
        # no network: the only request is the page itself
        urls = [e["params"]["request"]["url"] for e in browser.events if e.get("method") == "Network.requestWillBeSent"]
        assert urls == [url], urls
        assert browser.errors() == []
    finally:
        browser.close()


# ---------------------------------------------------------------------------------------------
# real data


def test_real_908_through_store_and_change_detection(tmp_path, trace_908):
    """The real 908 trace, cut into four pseudo-processes per run, recorded as 10 runs in the
    history store; from run 6 on, the most frequent templated reduction kernel is 20 % slower.
    The page must chart it first, marked as a regression, with the real kernel name."""
    changepoints = pytest.importorskip("pytest_gemmperf.history.changepoints")
    from pytest_gemmperf.gate.samples import samples_from_dispatches
    from pytest_gemmperf.history.store import HistoryStore, RunInfo
    from pytest_gemmperf.history.values import history_values

    d = trace_908.dispatches
    order = np.argsort(d["start_ns"].to_numpy(), kind="stable")
    run = np.empty(len(d), dtype=np.int64)
    run[order] = np.arange(len(d)) * 4 // len(d)
    names = d["kernel"].astype(str)
    slow = names[names.str.startswith("void at::native::reduce_kernel<")].value_counts().index[0]
    base = d.assign(run=pd.array(run, dtype="Int64"))
    values = history_values(samples_from_dispatches(base), test="908::aorta_train")
    values = values[values["metric"] == "dur_ns"]
    store = HistoryStore(str(tmp_path / "hist"))
    rng = np.random.default_rng(3)
    for k in range(10):
        v = values.assign(value=values["value"] * rng.lognormal(0, 0.01, len(values)))
        if k >= 6:
            v.loc[v["kernel"] == slow, "value"] *= 1.2
        store.append(v, RunInfo(run_id=f"r{k:02d}", time=T0 + pd.Timedelta(days=k), commit=f"{k:07x}abc",
                                branch="main", hw_key="mi350x"))
    hist = store.read()
    changes = changepoints.detect_changes(hist)
    hit = changes[(changes["kernel"] == slow)]
    assert len(hit) >= 1 and (hit["direction"] == "regression").all()
    files = write_history_reports(hist, changes, tmp_path / "out")
    html = files["history.html"].read_text(encoding="utf-8")
    first = re.search(r'<figure class="series flt"[^>]*>\s*<figcaption><details class="kn"><summary title="([^"]*)"', html)
    assert html_lib.unescape(first.group(1)) == slow
    assert '<g class="cp regression"' in html
    assert files["history.html"].stat().st_size < 3_000_000
    # "recent" means what `gemmperf history check --window 5` means
    n_recent = len(changepoints.recent_regressions(changes, hist, 5))
    assert n_recent >= 1 and f"({n_recent} within the last 5 runs of their series)" in html
    n3 = len(changepoints.recent_regressions(changes, hist, 3))
    assert f"({n3} within the last 3 runs" in render_history_page(hist, changes, recent_window=3)


def test_report_and_history_link_each_other(small, tmp_path):
    """Whichever page is written second links to the first (both land in one directory)."""
    from pytest_gemmperf.report import write_reports
    from test_report_html import _sweep

    h, c = small
    write_history_reports(h, c, tmp_path)
    report = write_reports(tmp_path, dispatches=_sweep(0, points=("th256",), ranks=(0,), n_per_kernel=10),
                           formats=["html"])["report.html"].read_text(encoding="utf-8")
    assert '<p id="history-link"><a href="history.html">' in report
    alone = write_reports(tmp_path / "alone", dispatches=_sweep(0, points=("th256",), ranks=(0,), n_per_kernel=10),
                          formats=["html"])["report.html"].read_text(encoding="utf-8")
    assert "history-link" not in alone
    again = write_history_reports(h, c, tmp_path)["history.html"].read_text(encoding="utf-8")
    assert '<a href="report.html">back to the run report</a>' in again


def test_edge_series_single_run_constant_and_unknown_commit():
    h = make_history(["k1", "k2"], n_runs=3, units=2, noise=0.0)
    h.loc[h["kernel"] == "k2", "value"] = 5.0  # constant: flat y range
    h.loc[h["run_id"] == "mi300x-run002", ["commit", "branch"]] = None
    h.loc[h.index[:1], "value"] = np.nan  # dropped, not charted as 0
    one = make_history(["k3"], n_runs=1, units=1, noise=0.0)  # one run, one process
    html = render_history_page(pd.concat([h, one], ignore_index=True), None)
    assert html.count('class="trend"') == 3
    assert "No change points were detected" in html and 'class="cp ' not in html
    assert "commit unknown" in html and "over 1 process\n" in html
    assert html.count('class="few"') == 3 + 3 + 1  # every run of these series has < 3 processes
    assert ">nan<" not in html.lower() and " nan " not in html.lower()

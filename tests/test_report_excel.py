"""report.xlsx opened with openpyxl: sheets, headers with units, values in the header's unit,
frozen headers and autofilters, no formulas from kernel names; LibreOffice converts it."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import openpyxl
import pandas as pd
import pytest

from test_report_html import FORMULA, NASTY, XSS, _sweep
from pytest_gemmperf.report import write_reports

SHEETS = ["summary", "verdicts", "kernels", "kernel_summary", "by_category", "short_kernels",
          "kernel_details", "top_variance", "overlap", "gpu_timeline", "Pivot_Time_ms",
          "Pivot_Percent", "Summary_By_Config", "counters", "environment"]
INJECTIONS = ["=1+1", "+SUM(A1:A2)", "-2+3", "@cmd", '=HYPERLINK("http://x")']


def _with_injection_names(d: pd.DataFrame) -> pd.DataFrame:
    """Rename some kernels to strings a spreadsheet would otherwise evaluate."""
    names = d["kernel"].astype(str)
    mapping = {"void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>":
               INJECTIONS[0] + "_gemm"}
    out = d.copy()
    out["kernel"] = pd.Categorical(names.replace(mapping))
    return out


@pytest.fixture(scope="module")
def workbook(tmp_path_factory):
    from pytest_gemmperf.gate.compare import compare
    from pytest_gemmperf.gate.samples import samples_from_dispatches

    base = _with_injection_names(_sweep(0))
    cand = _with_injection_names(_sweep(1, slow_kernel=NASTY, factor=1.3))
    v = compare(samples_from_dispatches(base), samples_from_dispatches(cand), test="t.py::test_x")
    out = tmp_path_factory.mktemp("xlsx")
    meta = {"commit": "=cmd|' /C calc'!A0", "rocm_version": "7.0.2", "hardware": "MI350X",
            "notes": ["+danger", "@x"]}
    files = write_reports(out, dispatches=cand, verdicts=v, meta=meta, formats=["xlsx"],
                          short_kernel_us=10.0)
    return files["report.xlsx"], cand, v


def _headers(ws) -> list[str]:
    return [c.value for c in ws[2] if c.value is not None]


def test_sheets_headers_and_layout(workbook):
    path, _, _ = workbook
    wb = openpyxl.load_workbook(path)
    assert wb.sheetnames == SHEETS
    for name in SHEETS:
        ws = wb[name]
        if name in ("summary", "counters"):
            continue
        assert ws.freeze_panes == "A3", name
        assert ws.auto_filter.ref and ws.auto_filter.ref.startswith("A2"), name
    k = _headers(wb["kernels"])
    assert k[:3] == ["point", "rank", "kernel"]
    assert "median (µs)" in k and "std (µs)" in k and not any(h.endswith("_ns") for h in k)
    v = _headers(wb["verdicts"])
    assert v[:5] == ["test", "point", "kernel", "short_name", "metric"]
    assert "base_median (µs)" in v and "base_value" in v and "ratio (cand/base)" in v
    top = _headers(wb["top_variance"])
    assert top[:7] == ["threads", "channel", "rank", "kernel_name", "kernel_time_min (µs)",
                       "kernel_time_max (µs)", "time_diff (µs)"]
    assert _headers(wb["gpu_timeline"]) == ["full_config", "threads_num", "thread_config", "channels_num",
                                            "channel_config", "num_ranks", "type", "time (ms)", "percent (%)"]
    assert _headers(wb["kernel_summary"])[:3] == ["name", "Count", "Mean Kernel Time (µs)"]
    sk = _headers(wb["short_kernels"])
    assert "Short Kernel duration (µs) sum" in sk and "bin_end (µs)" in sk
    # every numeric header names its unit or is a count/ratio/fraction
    assert "10 µs" in wb["short_kernels"]["A1"].value


def test_values_are_in_the_headers_unit(workbook):
    path, cand, v = workbook
    wb = openpyxl.load_workbook(path)
    ws = wb["kernels"]
    hdr = _headers(ws)
    rows = list(ws.iter_rows(min_row=3, values_only=True))
    frame = pd.DataFrame(rows, columns=hdr + [None] * (len(rows[0]) - len(hdr)))
    sel = frame[(frame["kernel"] == NASTY) & (frame["point"] == "ch28-th256") & (frame["rank"] == 0)]
    assert len(sel) == 1
    d = cand[(cand["kernel"] == NASTY) & (cand["point"] == "ch28-th256") & (cand["rank"] == 0)]
    assert sel["median (µs)"].iloc[0] == pytest.approx(np.median(d["dur_ns"]) / 1e3)
    assert ws.cell(3, hdr.index("median (µs)") + 1).number_format == "#,##0.000"
    # the timeline's percentages add up per config (computation+exposed+idle = total)
    tl = wb["gpu_timeline"]
    cells = pd.DataFrame(list(tl.iter_rows(min_row=3, values_only=True)), columns=_headers(tl))
    one = cells[cells["full_config"] == "ch28-th256"].set_index("type")["percent (%)"]
    assert one["computation_time"] + one["exposed_comm_time"] + one["exposed_memcpy_time"] + \
        one["idle_time"] == pytest.approx(100.0)
    # a regression is coloured by a conditional format on the ratio columns
    vs = wb["verdicts"]
    assert vs.conditional_formatting, "ratio columns must carry conditional colouring"


def test_no_formula_from_any_string(workbook):
    path, _, _ = workbook
    wb = openpyxl.load_workbook(path)
    seen_injection = set()
    for ws in wb.worksheets:
        for row in ws.iter_rows():
            for c in row:
                assert c.data_type != "f", f"{ws.title}!{c.coordinate} is a formula: {c.value!r}"
                if isinstance(c.value, str):
                    for s in INJECTIONS + [FORMULA, XSS, "=cmd"]:
                        if c.value.startswith(s):
                            seen_injection.add(s)
    assert {INJECTIONS[0], FORMULA, XSS, "=cmd"} <= seen_injection
    kernels = {c.value for c in wb["kernels"]["C"] if c.value}
    assert NASTY in kernels


def test_verdicts_short_name_beside_full_name(workbook):
    """The verdicts sheet's short_name column: the report.html label of each kernel, one per
    kernel and distinct; the full name stays in the kernel column."""
    path, cand, v = workbook
    ws = openpyxl.load_workbook(path)["verdicts"]
    hdr = _headers(ws)
    frame = pd.DataFrame([r[:len(hdr)] for r in ws.iter_rows(min_row=3, values_only=True)], columns=hdr)
    pairs = frame[["kernel", "short_name"]].drop_duplicates()
    assert len(pairs) == frame["kernel"].nunique() == pairs["short_name"].nunique()
    short = dict(zip(pairs["kernel"], pairs["short_name"]))
    assert short[NASTY] == "kernel_gemm" and NASTY in set(frame["kernel"])
    assert short["Cijk_Ailk_Bljk_HHS_BH_MT128x128x64_MI32x32x8"] == "Cijk_Ailk_Bljk_HHS_MT128x128x64"
    assert all(len(x) <= 48 for x in short.values())


def test_charts_present(workbook):
    path, _, _ = workbook
    import zipfile
    with zipfile.ZipFile(path) as z:
        charts = [n for n in z.namelist() if n.startswith("xl/charts/chart")]
    assert len(charts) >= 3  # category time, short-kernel histogram, timeline per config


def test_long_tables_are_capped_and_say_so(tmp_path):
    d = _sweep(0, points=("th256",), ranks=(0,), n_per_kernel=10)
    files = write_reports(tmp_path, dispatches=d, formats=["xlsx"], max_sheet_rows=5)
    wb = openpyxl.load_workbook(files["report.xlsx"])
    ws = wb["kernel_details"]
    assert "showing the first 5 of 100 rows" in ws["A1"].value
    assert ws.max_row == 2 + 5


@pytest.mark.skipif(shutil.which("libreoffice") is None and shutil.which("soffice") is None,
                    reason="LibreOffice not installed")
def test_libreoffice_converts_to_pdf(workbook, tmp_path):
    path, _, _ = workbook
    exe = shutil.which("libreoffice") or shutil.which("soffice")
    res = subprocess.run([exe, "--headless", "--convert-to", "pdf", "--outdir", str(tmp_path), str(path)],
                         capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "report.pdf").stat().st_size > 1000


def test_counters_sheet_and_html_section(tmp_path, fixtures_dir):
    from pytest_gemmperf.traces.discover import load

    t = load(fixtures_dir / "rocprof_json" / "v7_two_processes_counters_results.json")
    files = write_reports(tmp_path, dispatches=t.dispatches, counters=t.counters, agents=t.agents,
                          formats=["xlsx", "html"])
    ws = openpyxl.load_workbook(files["report.xlsx"])["counters"]
    hdr = _headers(ws)
    assert {"SQ_WAVES", "GRBM_GUI_ACTIVE", "waves", "cu_utilization", "median_dur (µs)"} <= set(hdr)
    row = dict(zip(hdr, [c.value for c in ws[3]]))
    assert row["waves"] == row["SQ_WAVES"]
    html = files["report.html"].read_text(encoding="utf-8")
    assert 'id="counter-table"' in html and "No hardware counters" not in html

"""Collectives in the reports: the HTML section (bus bandwidth vs message size per point, skew
per rank heat map) and the Excel sheets ``nccl_master_all_configs`` and ``collectives``, only
when the data has collectives; collective names render as text everywhere."""

from __future__ import annotations

import html
import re
from pathlib import Path

import openpyxl
import pandas as pd
import pytest

from pytest_gemmperf.analysis import collectives as C
from pytest_gemmperf.report import write_reports
from pytest_gemmperf.traces.schema import DISPATCH_SCHEMA, concat_tables
from test_gate_samples import synthetic, torch_point

#: a collective name with markup and a formula prefix: must stay text in HTML and Excel
ODD = '=allreduce<&"x">'


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> pd.DataFrame:
    """Two points of 2 runs x 4 ranks; ch56's allreduce is 30 % slower."""
    root = tmp_path_factory.mktemp("report_coll")
    return concat_tables([torch_point(root, runs=2, point="ch28-th256", seed=1, allreduce_name=ODD),
                          torch_point(root, runs=2, point="ch56-th256", seed=2, allreduce_name=ODD,
                                      allreduce_scale=1.3)], DISPATCH_SCHEMA)


@pytest.fixture(scope="module")
def report(sweep, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report_out")
    write_reports(out, dispatches=sweep, formats=("html", "xlsx"))
    return out


def _section(page: str) -> str:
    a = page.index('<section id="collectives">')
    return page[a:page.index("</section>", a)]


def test_html_section_plots_bandwidth_per_point_and_skew_per_rank(report, sweep):
    page = (report / "report.html").read_text(encoding="utf-8")
    sec = _section(page)
    assert "Collectives across ranks" in sec
    # one bandwidth panel per collective, one series per point, points at the bucket's size
    assert sec.count("bus bandwidth vs message size</title>") == 2
    summary = C.collective_summary(C.match_collectives(sweep).collectives)
    bw = {}
    for point in ("ch28-th256", "ch56-th256"):
        bw[point] = summary[(summary["point"] == point) & (summary["coll_name"] == ODD)]["busbw_gbps_median"].item()
        assert f"{point}: 4 MiB: {bw[point]:.2f} GB/s" in html.unescape(sec)
    assert bw["ch28-th256"] / bw["ch56-th256"] == pytest.approx(1.3, rel=0.03)
    # heat map: one cell per (point, rank)
    assert "mean wait for the last rank to arrive" in sec
    cells = re.findall(r"<title>(ch\d\d-th256, rank \d: mean wait [^<]*)</title>", sec)
    assert len(cells) == 8
    # tables: the best point of the allreduce is ch28 (ch56 is 30 % slower)
    assert 'id="collectives-table"' in sec and 'id="collective-best-table"' in sec
    best = sec[sec.index('id="collective-best-table"'):]
    assert re.search(r"4MiB</td><td>ch28-th256</td>", best)


def test_collective_names_render_as_text(report):
    page = (report / "report.html").read_text(encoding="utf-8")
    sec = _section(page)
    assert ODD not in page  # never raw markup
    assert "=allreduce&lt;&amp;&#34;x&#34;&gt;" in sec  # escaped in tables and SVG text
    assert "<&" not in sec


def test_excel_sheets_have_aorta_columns_units_and_no_formulas(report, sweep):
    wb = openpyxl.load_workbook(report / "report.xlsx")
    assert {"nccl_master_all_configs", "collectives"} <= set(wb.sheetnames)
    ws = wb["nccl_master_all_configs"]
    header = [c.value for c in ws[2]]
    assert header == list(C.NCCL_MASTER_COLUMNS) + ["point"]
    want = C.nccl_master_table(C.match_collectives(sweep))
    got = pd.DataFrame([[c.value for c in r] for r in ws.iter_rows(min_row=3)], columns=header)
    assert len(got) == len(want) == 4
    pd.testing.assert_series_equal(got["comm_latency_median"].astype(float), want["comm_latency_median"].astype(float),
                                   check_names=False, rtol=1e-12)
    assert set(got["Full msg size (MB)"]) == {2.0, 4.0}  # MB = 2**20 bytes
    assert set(got["Collective name"]) == {ODD, "_allgather_base"}
    assert set(got["full_config"]) == {"256thread_28ch", "256thread_56ch"}
    ws = wb["collectives"]
    head = [c.value for c in ws[2]]
    assert "latency_median (µs)" in head and "busbw_median (GB/s)" in head and "start_skew_max (µs)" in head
    assert any(str(c.value).startswith("per point and rank") for c in ws["A"] if c.value)
    assert any(c.value == "arrived_last (%)" for row in ws.iter_rows() for c in row)
    for sheet in wb.worksheets:
        for row in sheet.iter_rows():
            for c in row:
                assert c.data_type != "f", (sheet.title, c.coordinate, c.value)
                if c.value == ODD:
                    assert c.data_type == "s"


def test_no_collectives_no_section_no_sheets(tmp_path):
    d = synthetic(0, comm_offset_us=25)  # RCCL kernels but no torch collective metadata
    write_reports(tmp_path, dispatches=d, formats=("html", "xlsx"))
    assert 'id="collectives"' not in (tmp_path / "report.html").read_text(encoding="utf-8")
    names = openpyxl.load_workbook(tmp_path / "report.xlsx").sheetnames
    assert "nccl_master_all_configs" not in names and "collectives" not in names


def test_n_way_report_labels_every_sweep(sweep, tmp_path):
    ch28 = sweep[sweep["point"] == "ch28-th256"]
    write_reports(tmp_path, dispatches={"base": ch28, "cand": sweep}, formats=("html", "xlsx"))
    sec = html.unescape(_section((tmp_path / "report.html").read_text(encoding="utf-8")))
    assert "base: ch28-th256" in sec and "cand: ch56-th256" in sec and "base: ch56-th256" not in sec
    ws = openpyxl.load_workbook(tmp_path / "report.xlsx")["nccl_master_all_configs"]
    assert [c.value for c in ws[2]][0] == "label"

"""CSV, JSON and Markdown outputs: column contracts, aorta compatibility, CI-page safety."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from test_report_html import NASTY, XSS, _sweep
from pytest_gemmperf.analysis.variance import AORTA_COLUMNS, OVERLAP_COLUMNS, TIMESTAMP_COLUMNS
from pytest_gemmperf.gate.verdict import VERDICT_COLUMNS
from pytest_gemmperf.report import write_reports
from pytest_gemmperf.report.tables import md_code

AORTA_OVERLAP_SET = list(AORTA_COLUMNS) + list(TIMESTAMP_COLUMNS) + list(OVERLAP_COLUMNS)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    from pytest_gemmperf.gate.compare import compare
    from pytest_gemmperf.gate.samples import samples_from_dispatches

    base = _sweep(0)
    cand = _sweep(1, slow_kernel=NASTY, factor=1.3)
    v = compare(samples_from_dispatches(base), samples_from_dispatches(cand), test="t.py::test_x")
    out = tmp_path_factory.mktemp("tables")
    files = write_reports(out, dispatches=cand, verdicts=v, formats=["csv", "json", "md"],
                          meta={"commit": "abc|def", "rocm_version": "7.0.2"})
    return files, cand, v


def test_files_written(outputs):
    files, _, _ = outputs
    assert set(files) == {"kernels.csv", "verdicts.csv", "top5_gemm_kernels_time_variance.csv",
                          "top5_gemm_kernels_time_variance_with_timestamps.csv",
                          "top5_gemm_kernels_time_variance_with_collective_overlap.csv",
                          "summary.json", "summary.md"}


def test_kernels_and_verdicts_csv(outputs):
    files, cand, v = outputs
    k = pd.read_csv(files["kernels.csv"])
    assert list(k.columns[:5]) == ["point", "rank", "kernel", "count", "total_ns"]
    assert len(k) == cand.groupby(["point", "rank", "kernel"], observed=True).ngroups
    assert NASTY in set(k["kernel"])  # commas and quotes survive CSV quoting
    ver = pd.read_csv(files["verdicts.csv"], keep_default_na=False)
    assert list(ver.columns[: len(VERDICT_COLUMNS)]) == list(VERDICT_COLUMNS)
    assert len(ver) == len(v)
    assert ver["verdict"].iloc[0] == "regression"  # most severe first
    assert ver["kernel"].iloc[0] == NASTY


def test_aorta_variance_csvs(outputs):
    files, cand, _ = outputs
    base = pd.read_csv(files["top5_gemm_kernels_time_variance.csv"])
    ts = pd.read_csv(files["top5_gemm_kernels_time_variance_with_timestamps.csv"])
    ov = pd.read_csv(files["top5_gemm_kernels_time_variance_with_collective_overlap.csv"])
    assert list(base.columns[:7]) == list(AORTA_COLUMNS)
    assert list(ts.columns[:12]) == list(AORTA_COLUMNS) + list(TIMESTAMP_COLUMNS)
    assert list(ov.columns[:17]) == AORTA_OVERLAP_SET
    # aorta sorts descending by time_diff_us; threads/channel come from the point ids
    assert base["time_diff_us"].is_monotonic_decreasing
    assert set(base["threads"]) == {256, 512} and set(base["channel"]) == {28, 56}
    row = base.iloc[0]
    d = cand[(cand["point"] == f"ch{row.channel}-th{row.threads}") & (cand["rank"] == row["rank"])
             & (cand["kernel"] == row.kernel_name)]
    assert row.time_diff_us == pytest.approx((d["dur_ns"].max() - d["dur_ns"].min()) / 1e3)
    # the synthetic GEMMs run under a collective: the max instance overlaps it
    assert (ov["overlapping_collective_count"] >= 1).all()


def test_summary_json(outputs):
    files, _, v = outputs
    s = json.loads(files["summary.json"].read_text())
    assert s["status"] == "failed"  # the run's outcome (gate/outcome.py): a point has a regression
    assert s["outcome_counts"]["failed"] >= 1
    assert s["verdict_counts"]["regression"] == int((v["verdict"] == "regression").sum())
    assert s["regressions"][0]["kernel"] == NASTY
    assert s["points"] == ["ch28-th256", "ch28-th512", "ch56-th256", "ch56-th512"]
    assert s["meta"]["commit"] == "abc|def"
    assert "summary.md" in s["files"]


def test_summary_md_is_small_and_safe(outputs):
    files, _, _ = outputs
    md = files["summary.md"].read_text()
    assert md.startswith("## gemmperf: FAILED: REGRESSION")
    assert "* points: " in md and " failed" in md
    assert len(md.encode()) < 20_000
    # outside code spans, no raw HTML can appear (GitHub renders raw tags in Markdown)
    outside = re.sub(r"(`+)(?:(?!\1).)*\1", "", md)
    assert "<" not in outside.replace("\\<", "") and "<script" not in outside
    assert md_code(XSS) in md or "alert" not in md
    assert "abc\\|def" in md  # a pipe inside a table/list cell is escaped
    table_rows = [ln for ln in md.splitlines() if ln.startswith("| regression")]
    assert table_rows and all(ln.count(" | ") == 6 for ln in table_rows)  # + the reason
    # the regressed kernel reads by its short label (report.html's), not an elided middle
    kernels = {ln.split(" | ")[2] for ln in table_rows}
    assert md_code("kernel_gemm") in kernels and not any("..." in k for k in kernels), kernels


def test_md_code_handles_backticks_and_pipes():
    assert md_code("a`b|c") == "``a`b\\|c``"
    assert md_code("`x`") == "`` `x` ``"


def test_analysis_only_outputs(tmp_path):
    d = _sweep(0, points=("th256",), ranks=(0,), n_per_kernel=10)
    files = write_reports(tmp_path, dispatches=d, formats=["csv", "json", "md"])
    assert "verdicts.csv" not in files
    s = json.loads(files["summary.json"].read_text())
    assert s["status"] == "analysis" and s["verdict_counts"] == {}
    assert "ANALYSIS ONLY" in files["summary.md"].read_text()

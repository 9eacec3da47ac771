"""What the parent of ``gemmperf analyze --jobs N`` does after the pool, done once and where it
pays: the reports' GEMM views computed in the process beside while this one builds the other
tables, the kernel statistics of one grouping computed once for kernels.csv and the reports,
the process-GPU groups found where each source is read, the parts' text tables joined as text,
the kernel labels computed once per report and the workbook assembled without temporary files.
Each gives the bytes the work done here, as before, gives."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from pytest_gemmperf.analysis import kernel_stats
from pytest_gemmperf.analysis.kernel_stats import ROW_KEYS, concat_rows, drop_warmup, duration_rows
from pytest_gemmperf.analysis.report_parts import (SweepReduction, gpu_group_keys, merge_parts, report_part,
                                                   shared_gpu_groups)
from pytest_gemmperf.analysis.source_totals import dispatch_totals
from pytest_gemmperf.report import data as report_data
from pytest_gemmperf.report.data import build_report_data, views_beside
from pytest_gemmperf.traces import parallel
from pytest_gemmperf.traces.schema import DISPATCH_SCHEMA, concat_tables
from test_parallel_beside import EXCEL, _Recording
from test_parallel_reports import _analyze, _sweep, _views
from test_parallel_analyze import _csv_tree

TOTALS_SCHEMA = DISPATCH_SCHEMA | {c: "int64" for c in ("n_dispatches", "total_ns", "first_start_ns",
                                                         "last_end_ns", "zero_dur", "queue_overlap")}


def _reduced(seed: int, warmup: int = 0) -> SweepReduction:
    frames = _sweep(seed, 2 + seed % 4)
    return SweepReduction(
        rows=concat_rows([duration_rows(drop_warmup(f, warmup), ROW_KEYS) for f in frames]),
        totals=concat_tables([dispatch_totals(f) for f in frames], TOTALS_SCHEMA),
        parts=merge_parts([report_part(f, warmup=warmup, short_us=50.0) for f in frames]))


def _same_views(got, want) -> None:
    got, want = _views(got), _views(want)
    assert got.keys() == want.keys()
    for k in want:
        pd.testing.assert_frame_equal(got[k], want[k], check_exact=True, obj=k)


@pytest.mark.slow  # a forked process
@pytest.mark.parametrize("seed", [0, 3])
def test_gemm_views_computed_beside_are_those_computed_here(seed, monkeypatch):
    monkeypatch.setattr(parallel, "_fork_server_started", True)
    want = build_report_data(_reduced(seed), top_k=3)
    with parallel.beside((EXCEL,)) as helper:
        recording = _Recording(helper)
        got = build_report_data(views_beside(_reduced(seed), recording, top_k=3), top_k=3)
        assert recording.given == ["gemm_views"]
        # asked with another top-K than they were started with: computed here, never mixed up
        other = build_report_data(views_beside(_reduced(seed), recording, top_k=5), top_k=3)
    _same_views(got, want)
    _same_views(other, want)


@pytest.mark.slow  # a process pool and a process beside it
def test_the_command_computes_the_gemm_views_and_the_workbook_beside(tmp_path, monkeypatch):
    monkeypatch.setattr(parallel, "POOL_MIN_BYTES", 0)  # the pool on small fixtures
    monkeypatch.setattr(parallel, "_fork_server_started", False)  # as in a command's own process
    given: list[str] = []
    submit = parallel.Beside.submit

    def recording(self, fn, *args, **kwargs):
        given.append(fn.__name__)
        return submit(self, fn, *args, **kwargs)

    monkeypatch.setattr(parallel.Beside, "submit", recording)
    root = _csv_tree(tmp_path)
    serial = _analyze(tmp_path, "j1", root, "--jobs", "1")
    assert given == []  # no pool, no process beside
    pooled = _analyze(tmp_path, "j2", root, "--jobs", "2")
    assert given == ["gemm_views", "_write_excel"]
    assert [f for f in serial if pooled.get(f) != serial[f]] == [] and pooled.keys() == serial.keys()


def _one_process_rows(seed: int):
    """Rows as one process's files give them: no point, no rank (nulls filled for kernels.csv)."""
    frames = [f.assign(point=pd.Categorical([None] * len(f)), rank=pd.array([None] * len(f), dtype="Int64"))
              for f in _sweep(seed, 3)]
    return concat_rows([duration_rows(f, ROW_KEYS) for f in frames])


@pytest.mark.parametrize("seed", range(3))
def test_the_statistics_of_one_grouping_are_computed_once(seed, monkeypatch):
    """kernels.csv's table (its null keys filled) and the reports' (nulls kept) number the
    groups of one process's rows alike: their statistics are computed once, and equal those
    computed afresh; where the numbers differ (points and ranks, some null), each is computed."""
    from pytest_gemmperf.commands.analyze_impl import rows_kernel_table

    calls: list[int] = []
    real = kernel_stats.group_statistics
    for rows, computed in ((_one_process_rows(seed), 1), (_reduced(seed).rows, 2)):
        fresh_table = rows_kernel_table(concat_rows([rows]), mixed=False)
        fresh_stats = kernel_stats.rows_kernel_stats(concat_rows([rows]))
        monkeypatch.setattr(kernel_stats, "group_statistics", lambda *a: calls.append(1) or real(*a))
        shared = concat_rows([rows])
        table = rows_kernel_table(shared, mixed=False)
        stats = kernel_stats.rows_kernel_stats(shared)
        assert len(calls) == computed
        pd.testing.assert_frame_equal(table, fresh_table, check_exact=True)
        pd.testing.assert_frame_equal(stats, fresh_stats, check_exact=True)
        # what the caller does with its table leaves the cached statistics as they were
        stats["median_ns"] *= 0
        pd.testing.assert_frame_equal(kernel_stats.rows_kernel_stats(shared), fresh_stats, check_exact=True)
        assert len(calls) == computed
        monkeypatch.undo()
        calls.clear()


@pytest.mark.parametrize("seed", range(4))
def test_parts_carry_their_gpu_groups(seed):
    """Each part names its process-GPU groups where it is read; whether two parts share one is
    what comparing their timelines' key rows, nulls alike, says."""
    frames = _sweep(seed, 3)
    if seed % 2:  # one GPU group in two sources: the second frame's dispatches of the first's file
        frames[1] = frames[1].assign(file=frames[0]["file"].iloc[0], host=frames[0]["host"].iloc[0],
                                     pid=frames[0]["pid"].iloc[0], run=frames[0]["run"].iloc[0])
    parts = [report_part(f) for f in frames]
    keys = ["point", "rank", "run", "pass", "file", "host", "pid", "agent"]

    def reference(tl: pd.DataFrame) -> set:
        return {tuple(None if pd.isna(v) else v for v in r) for r in
                tl[[c for c in keys if c in tl.columns]].astype(object).itertuples(index=False, name=None)}

    for p in parts:
        assert p.gpu_groups == reference(p.timeline) == gpu_group_keys(p.timeline)
    seen, shared = set(), False
    for p in parts:
        shared |= bool(seen & reference(p.timeline))
        seen |= reference(p.timeline)
    assert shared_gpu_groups(parts) is shared
    assert shared is bool(seed % 2)


def test_merged_text_tables_are_text():
    """The parts' kernel details and timelines are joined as text (what the reports show of
    them), not as categoricals re-coded table by table."""
    parts = _reduced(1).parts
    for table in (parts.details, parts.timeline):
        assert not any(isinstance(t, pd.CategoricalDtype) for t in table.dtypes)
    assert parts.details["kernel"].map(type).isin([str, type(None)]).all()


def test_kernel_labels_are_computed_once_per_report(tmp_path, monkeypatch):
    from pytest_gemmperf.report import write_reports

    calls: list[int] = []
    real = report_data.page_kernel_labels
    monkeypatch.setattr(report_data, "page_kernel_labels", lambda cols: calls.append(1) or real(cols))
    frames = _sweep(0, 2)
    write_reports(tmp_path, dispatches=concat_tables(frames, DISPATCH_SCHEMA))
    assert len(calls) == 1  # report.html, report.xlsx and summary.md read the same labels


def test_the_workbook_is_assembled_without_temporary_files(tmp_path, monkeypatch):
    from pytest_gemmperf.report import write_reports

    def refuse(*args, **kwargs):
        raise AssertionError("a temporary file")

    frames = _sweep(0, 2)
    here = write_reports(tmp_path / "a", dispatches=concat_tables(frames, DISPATCH_SCHEMA), formats=["xlsx"])
    import xlsxwriter.packager  # where xlsxwriter makes its temporary files

    monkeypatch.setattr(xlsxwriter.packager, "tempfile", SimpleNamespace(mkstemp=refuse))
    again = write_reports(tmp_path / "b", dispatches=concat_tables(frames, DISPATCH_SCHEMA), formats=["xlsx"])
    import zipfile
    with zipfile.ZipFile(here["report.xlsx"]) as a, zipfile.ZipFile(again["report.xlsx"]) as b:
        names = [n for n in a.namelist() if not n.startswith("docProps/")]
        assert names == [n for n in b.namelist() if not n.startswith("docProps/")]
        assert all(a.read(n) == b.read(n) for n in names)

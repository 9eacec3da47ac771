"""A source's dispatches handed over as codes (``traces/coded.py``) are reduced without their
table (``analysis/source_totals.coded_reduction``) to exactly what the table's reduction gives:
the same duration rows (keys, their numbering and order, groups, durations) and totals."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_gemmperf.analysis import source_totals
from pytest_gemmperf.analysis.kernel_stats import ROW_KEYS, duration_rows
from pytest_gemmperf.analysis.source_totals import coded_reduction, dispatch_totals
from pytest_gemmperf.traces.coded import CodedDispatches
from pytest_gemmperf.traces.schema import INT


def _coded(rng: np.random.Generator, n: int, n_keys: int, columns: tuple[str, ...]) -> CodedDispatches:
    """Key rows that repeat values (rows of one group under ROW_KEYS), null points and ranks,
    unused key rows and categories, durations of several widths."""
    names = [f"k{i}" for i in range(6)]
    kernel = pd.Categorical(rng.choice(names, n_keys), categories=list(rng.permutation(names)))
    rank = pd.array(rng.choice([0, 3, -1], n_keys), dtype=INT)
    rank[rng.random(n_keys) < 0.3] = pd.NA
    keys = pd.DataFrame({
        "source": pd.Categorical(["torch"] * n_keys),
        "host": pd.Categorical(rng.choice(["a", "b"], n_keys)),   # not a row key: merges rows
        "point": pd.Categorical(rng.choice(["p0", None], n_keys), categories=["p0", "p9"]),
        "rank": rank,
        "kernel": kernel,
        "category": pd.Categorical([f"c{int(k[1:]) % 2}" for k in kernel]),
    })
    used = rng.integers(1, n_keys + 1)  # some key rows no dispatch has
    code = rng.integers(0, used, n).astype(rng.choice([np.int16, np.uint8, np.int64]))
    top = int(rng.choice([200, 70_000, 2 ** 40]))
    dur = rng.integers(0, top, n)
    dur[rng.random(n) < 0.1] = 0
    dur = dur.astype(np.uint32) if top < 2 ** 32 else dur
    start = rng.integers(-(2 ** 40), 2 ** 60, n)
    return CodedDispatches(keys=keys[[c for c in columns if c in keys.columns]], code=code, start_ns=start,
                           dur_ns=dur, queue_overlap=rng.random(n) < 0.2, columns=columns)


_TABLE = ("source", "host", "point", "rank", "kernel", "category", "start_ns", "end_ns", "dur_ns",
          "zero_dur", "queue_overlap")


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2 ** 32 - 1), st.integers(1, 3000), st.integers(1, 12),
       st.sampled_from([_TABLE, ("kernel", "start_ns", "end_ns", "dur_ns", "zero_dur", "queue_overlap"),
                        ("rank", "kernel", "dur_ns", "start_ns", "end_ns", "queue_overlap", "zero_dur")]))
def test_coded_reduction_equals_the_tables(seed, n, n_keys, columns):
    rng = np.random.default_rng(seed)
    c = _coded(rng, n, n_keys, columns)
    table = c.frame()
    assert list(table.columns) == list(columns) and len(table) == n
    rows, totals = coded_reduction(c)
    want = duration_rows(table, ROW_KEYS)
    pd.testing.assert_frame_equal(rows.keys, want.keys, check_exact=True)
    assert rows.group.dtype == want.group.dtype and (rows.group == want.group).all()
    assert rows.dur_ns.dtype == want.dur_ns.dtype and (rows.dur_ns == want.dur_ns).all()
    pd.testing.assert_frame_equal(totals, dispatch_totals(table), check_exact=True)


def test_totals_do_not_depend_on_the_slices(monkeypatch):
    """Several slices of dispatches (a group's first dispatch in a later slice) give one slice's
    totals and numbering."""
    rng = np.random.default_rng(7)
    c = _coded(rng, 5000, 9, _TABLE)
    whole = coded_reduction(c)
    monkeypatch.setattr(source_totals, "_SLICE", 97)
    sliced = coded_reduction(c)
    pd.testing.assert_frame_equal(sliced[1], whole[1])
    pd.testing.assert_frame_equal(sliced[0].keys, whole[0].keys)
    assert (sliced[0].group == whole[0].group).all()


def test_frame_keeps_the_key_rows_dtypes_and_the_columns_order():
    c = _coded(np.random.default_rng(3), 50, 4, _TABLE)
    sel = c.select(["dur_ns", "kernel", "nope", "rank"])
    assert sel.columns == ("dur_ns", "kernel", "rank")
    got = sel.frame()
    assert list(got.columns) == ["dur_ns", "kernel", "rank"]
    assert got["kernel"].dtype == c.keys["kernel"].dtype and str(got["rank"].dtype) == INT
    assert got["dur_ns"].dtype == np.int64


@pytest.mark.parametrize("n", [0, 1])
def test_tiny_sources(n):
    c = _coded(np.random.default_rng(n), n, 1, _TABLE)
    if n == 0:
        assert len(c.frame()) == 0
        return
    rows, totals = coded_reduction(c)
    pd.testing.assert_frame_equal(totals, dispatch_totals(c.frame()), check_exact=True)


def test_analyze_no_report_reduces_slim_reads_without_their_table(tmp_path, monkeypatch):
    """A Kineto trace and a rocprofv3 JSON are reduced from their codes: no dispatches table is
    made for them (its ~40 bytes a dispatch set the peak of a 1 GB trace's run)."""
    import shutil
    from pathlib import Path

    from pytest_gemmperf.analysis.kernel_stats import concat_rows, rows_kernel_stats
    from pytest_gemmperf.analysis.source_totals import reduce_sources

    fix = Path(__file__).parent / "fixtures"
    root = tmp_path / "in"
    shutil.copytree(fix / "rocprof_json", root / "json")
    shutil.copy(fix / "torch" / "rocm_sdk_rank3.pt.trace.json", root)
    want = reduce_sources([root], jobs=1, warmup=1)  # a warm-up's drop reads the table
    assert want is not None

    def refuse(self):
        raise AssertionError("a dispatches table was made")

    monkeypatch.setattr(CodedDispatches, "frame", refuse)
    got = reduce_sources([root], jobs=1)
    assert got is not None and len(got.totals) and set(got.totals["source"]) == {"rocprof-json", "torch"}
    assert len(rows_kernel_stats(got.rows)) > 0


def test_concat_rows_keeps_the_narrow_types():
    """Joined rows stay a few bytes a dispatch (the statistics read them so), the group index
    widened only as far as the joined keys need."""
    from pytest_gemmperf.analysis.kernel_stats import DurationRows, concat_rows

    keys = pd.DataFrame({"kernel": pd.Categorical(["a", "b"])})
    part = DurationRows(keys, np.array([0, 1, 1], np.uint8), np.array([5, 7, 300], np.uint16))
    joined = concat_rows([part] * 200)  # 400 keys: past uint8
    assert joined.group.dtype == np.uint16 and joined.dur_ns.dtype == np.uint16
    assert joined.group[-3:].tolist() == [398, 399, 399] and joined.dur_ns[-1] == 300

"""The fixed cost of reading a small trace: tables built once, the shortcuts equal to the long way.

``gemmperf analyze`` of a trace of tens of dispatches spends its read on pandas' per-operation
overhead, not on the rows: every column set on a frame copies the frame's blocks (about half a
millisecond each on a table of tens of rows), so the readers collect a table's columns and make
the frame once. The shortcuts this takes (a string column's cast to categories in one step, a
constant column's categories made directly, ``torch_link.take`` through the array's own take)
must give what the long way gave, dtypes and categories included: checked here on every kind
of column the readers pass them.
"""

from __future__ import annotations

import collections

import numpy as np
import pandas as pd
import pytest

from conftest import FIXTURES
from pytest_gemmperf.traces.discover import discover_all
from pytest_gemmperf.traces.schema import as_category, no_categories, repeated_category
from pytest_gemmperf.traces.source_reader import read_attached
from pytest_gemmperf.traces.torch_link import take

KINETO = (FIXTURES / "torch" / "rocm_sdk_rank3.pt.trace.json",
          FIXTURES / "torch" / "gpuhost-01_777.1700000001000000000.pt.trace.json.gz")
CSV = FIXTURES / "rocprof_csv" / "v7" / "mi350-n1"


def _columns_set_one_at_a_time(path, monkeypatch) -> int:
    """How often a full read of ``path`` sets a column on a frame (``DataFrame.__setitem__``)."""
    calls = collections.Counter()
    original = pd.DataFrame.__setitem__

    def counting(self, key, value):
        calls["set"] += 1
        return original(self, key, value)

    src = discover_all([path]).unique[0]
    with monkeypatch.context() as m:
        m.setattr(pd.DataFrame, "__setitem__", counting)
        t, _, _ = read_attached(src, None, None, False)
    assert len(t.dispatches)
    return calls["set"]


@pytest.mark.parametrize("path", KINETO, ids=["rocm", "cuda"])
def test_a_small_kineto_read_builds_its_dispatches_table_once(path, monkeypatch):
    # 63 and 64 before the columns were collected first (80 for the start-up benchmark's trace)
    assert _columns_set_one_at_a_time(path, monkeypatch) <= 8


def test_a_small_csv_read_builds_its_dispatches_table_once(monkeypatch):
    # 55 before finalize_dispatches collected its columns first
    assert _columns_set_one_at_a_time(CSV, monkeypatch) <= 12


def _as_category_the_long_way(s: pd.Series) -> pd.Series:
    return s.astype("object").where(s.notna(), None).astype("category")


def _same(a: pd.Series, b: pd.Series) -> None:
    pd.testing.assert_series_equal(a, b, check_exact=True, check_categorical=True)
    if isinstance(a.dtype, pd.CategoricalDtype):
        assert a.cat.categories.dtype == b.cat.categories.dtype
        assert list(a.cat.codes) == list(b.cat.codes)


COLUMNS = {
    "object strings": pd.Series(["b", None, "a", "b", np.nan], dtype=object),
    "object all None": pd.Series([None, None, None], dtype=object),
    "object ints": pd.Series([3, None, 1], dtype=object),
    "str": pd.Series(["x", None, "y"], dtype="str"),
    "str all missing": pd.Series([None, None], dtype="str"),
    "Int64": pd.Series([1, None, 2], dtype="Int64"),
    "float": pd.Series([1.5, np.nan, 2.0]),
    "empty object": pd.Series([], dtype=object),
}


@pytest.mark.parametrize("name", list(COLUMNS))
def test_as_category_equals_the_three_step_cast(name):
    _same(as_category(COLUMNS[name]), _as_category_the_long_way(COLUMNS[name]))


@pytest.mark.parametrize("value", ["torch", "/a path/ü.json", "", "nan", "None", "1"])
@pytest.mark.parametrize("n", [1, 7])
def test_repeated_category_equals_the_cast_of_a_repeated_string(value, n):
    _same(pd.Series(repeated_category(value, n)), _as_category_the_long_way(pd.Series([value] * n, dtype="str")))


@pytest.mark.parametrize("dtype", [object, "str"])
def test_no_categories_is_the_empty_index_dtype(dtype):
    built = pd.Categorical.from_codes(np.full(3, -1, dtype=np.int8), categories=pd.Index([], dtype=dtype))
    shared = pd.Categorical.from_codes(np.full(3, -1, dtype=np.int8), dtype=no_categories(dtype))
    _same(pd.Series(shared), pd.Series(built))
    assert no_categories(dtype) is no_categories(dtype)


def _take_the_long_way(col: pd.Series, rows: np.ndarray) -> pd.Series:
    safe = np.where(rows < 0, 0, rows)
    vals = col.iloc[safe].reset_index(drop=True)
    return vals.where(pd.Series(rows >= 0), None) if vals.dtype == object else vals.mask(pd.Series(rows < 0))


TAKEN = {
    "object": pd.Series(["op", None, "mm", [1, 2]], dtype=object, name="name"),
    "Int64": pd.Series([4, None, 6, 7], dtype="Int64", name="tid"),
    "str": pd.Series(["a", None, "c", "d"], dtype="str", name="name"),
    "category": pd.Series(["k", "j", None, "k"], dtype="category", name="kernel"),
    "int64": pd.Series([1, 2, 3, 4], dtype="int64", name="ts_ns"),
    "bool": pd.Series([True, False, True, False], name="has_grid"),
}


@pytest.mark.parametrize("name", list(TAKEN))
@pytest.mark.parametrize("seed", range(4))
def test_take_equals_iloc_then_mask(name, seed):
    rng = np.random.default_rng(seed)
    col = TAKEN[name]
    rows = rng.integers(-1, len(col), size=9)
    if seed == 0:
        rows[:] = np.maximum(rows, 0)  # no missing row: an int64 column keeps its dtype
    got, want = take(col, rows), _take_the_long_way(col, rows)
    pd.testing.assert_series_equal(got, want, check_exact=True)
    assert got.name == col.name


@pytest.mark.parametrize("path", KINETO, ids=["rocm", "cuda"])
def test_a_kineto_read_makes_no_empty_frame_of_a_kind_its_runs_hold(path, monkeypatch):
    # the frames of no operators and no runtime calls were made on every read, then dropped
    from pytest_gemmperf.traces import torch_trace

    empty_frames = []
    for name in ("_cpu_ops_frame", "_runtime_frame"):
        original = getattr(torch_trace, name)

        def noting(events, *a, _f=original, _n=name, **k):
            if not events:
                empty_frames.append(_n)
            return _f(events, *a, **k)

        monkeypatch.setattr(torch_trace, name, noting)
    src = discover_all([path]).unique[0]
    t, _, _ = read_attached(src, None, None, False)
    assert len(t.dispatches) and len(t.meta["cpu_ops"])
    assert empty_frames == []

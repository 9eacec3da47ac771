"""Readers that collect their columns make each table once, and the short way equals the long one.

A small trace's read is mostly pandas' fixed cost per operation: a frame made of Series aligns
their indexes first, and a reader's columns made into a frame only to be taken apart again by
``finalize_dispatches`` cost a frame build and a pass over its columns. The shortcuts
(``finalize_dispatch_columns`` of the columns themselves, ``constant_column`` for pid, host and
rank, the Kineto frames made of arrays on one index) must give what the long way gave, dtypes
and categories included.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.traces.schema import (INT, STR, constant_column, finalize_dispatch_columns,
                                           finalize_dispatches)
from pytest_gemmperf.traces.torch_frames import _frame


def _same_table(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a, b, check_exact=True, check_categorical=True)
    assert list(a.columns) == list(b.columns) and type(a.index) is type(b.index)
    for c in a.columns:
        assert a[c].dtype == b[c].dtype, c
        if isinstance(a[c].dtype, pd.CategoricalDtype):
            assert a[c].cat.categories.dtype == b[c].cat.categories.dtype, c
            assert list(a[c].cat.codes) == list(b[c].cat.codes), c


def _columns(rng: np.random.Generator, n: int) -> dict:
    """A reader's columns of every kind it passes: numpy, nullable ints, categoricals, object
    text (None included), Series on a default index of their own."""
    start = rng.integers(0, 10 ** 12, size=n)
    kernels = np.array(["gemm_a", "Cijk_x<int>(a, b)", "Memcpy HtoD (Host -> Device)", None],
                       dtype=object)[rng.integers(0, 4, size=n)]
    kernels[0] = "k0"  # start and end need a kernel; some rows keep None
    missing = rng.random(n) < 0.3
    return {
        "start_ns": start,
        "end_ns": start + rng.integers(0, 5000, size=n),
        "kernel": pd.Series(kernels, dtype=object),
        "agent": pd.arrays.IntegerArray(rng.integers(0, 4, size=n), missing.copy()),
        "stream": pd.Series(pd.arrays.IntegerArray(rng.integers(0, 3, size=n), missing[::-1].copy())),
        "queue": pd.Series(rng.integers(0, 3, size=n)),  # int64, coerced to Int64
        "host": pd.Series(["node-a"] * n, dtype="str"),
        "source": pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=["torch"]),
        "extra_text": pd.Series(kernels, dtype=object),  # not in the schema: kept after it
        "extra_flag": rng.random(n) < 0.5,
    }


@pytest.mark.parametrize("n", [1, 2, 7, 40])
@pytest.mark.parametrize("seed", range(3))
def test_finalizing_columns_equals_finalizing_the_frame_of_them(n, seed):
    cols = _columns(np.random.default_rng(seed), n)
    index = pd.RangeIndex(n)
    frame = pd.DataFrame(dict(cols), index=index)
    _same_table(finalize_dispatch_columns(dict(cols), index, "/x/t.json"),
                finalize_dispatches(frame, "/x/t.json"))


def test_finalizing_columns_reports_what_the_frame_reports():
    cols = _columns(np.random.default_rng(0), 5)
    cols["end_ns"] = cols["start_ns"] - 1
    cols["dispatch_id"] = pd.arrays.IntegerArray(np.arange(5), np.zeros(5, dtype=bool))
    errors = []
    for call in (lambda: finalize_dispatch_columns(dict(cols), pd.RangeIndex(5), "p"),
                 lambda: finalize_dispatches(pd.DataFrame(dict(cols)), "p")):
        with pytest.raises(Exception) as info:
            call()
        errors.append(str(info.value))
    assert errors[0] == errors[1] and "dispatch_id 0" in errors[0]


@pytest.mark.parametrize("value, dtype", [(5, INT), (2 ** 62, INT), (None, INT), ("node-a", STR),
                                          ("", STR), ("nan", STR), (None, STR)])
@pytest.mark.parametrize("n", [1, 6])
def test_constant_column_equals_the_coerced_broadcast_scalar(value, dtype, n):
    # the torch reader once passed pid, host and rank as scalars for the frame to broadcast
    index = pd.RangeIndex(n)
    base = {"start_ns": np.arange(n), "end_ns": np.arange(n) + 1, "kernel": pd.Series(["k"] * n, dtype=object)}
    col = "pid" if dtype == INT else "host"
    long = finalize_dispatches(pd.DataFrame({**base, col: value}, index=index), None)
    short = finalize_dispatch_columns({**base, col: constant_column(value, dtype, n)}, index, None)
    _same_table(short, long)


@pytest.mark.parametrize("n", [0, 1, 9])
def test_a_frame_made_of_arrays_on_one_index_equals_one_made_of_series(n):
    rng = np.random.default_rng(n)
    names = [f"aten::op{i % 3}" if i % 4 else None for i in range(n)]
    ids = pd.arrays.IntegerArray(rng.integers(0, 9, size=n), rng.random(n) < 0.3)
    coll = np.full(n, None, dtype=object)
    made = _frame({"name": list(names), "pid": ids.copy(), "ts_ns": np.arange(n), "coll": coll.copy(),
                   "flag": [True] * n}, n, ("name",))
    long = pd.DataFrame({"name": pd.Series(names, dtype=object), "pid": pd.Series(ids.copy()),
                         "ts_ns": np.arange(n), "coll": coll.copy(), "flag": [True] * n})
    _same_table(made, long)
    assert made["name"].dtype == object


def _steps_the_long_way(annotated: pd.DataFrame, old: pd.DataFrame) -> pd.DataFrame:
    names = list(annotated["name"]) + list(old["name"])
    old_start = old["ts_ns"].to_numpy(dtype=np.int64)
    df = pd.DataFrame({
        "name": pd.Series(names, dtype=object),
        "step": pd.Series([int(n.split("#")[1]) for n in names], dtype="int64"),
        "start_ns": np.concatenate([annotated["start_ns"].to_numpy(dtype=np.int64), old_start]),
        "end_ns": np.concatenate([annotated["end_ns"].to_numpy(dtype=np.int64),
                                  old_start + old["dur_ns"].to_numpy(dtype=np.int64)]),
    })
    return df.sort_values("start_ns", kind="stable").reset_index(drop=True)


@pytest.mark.parametrize("n_ann, n_old", [(0, 0), (1, 0), (0, 2), (5, 4), (12, 0)])
@pytest.mark.parametrize("seed", range(3))
def test_steps_frame_equals_the_sorted_frame(n_ann, n_old, seed):
    from pytest_gemmperf.traces.torch_frames import _steps_frame

    rng = np.random.default_rng(seed)
    starts = rng.integers(0, 6, size=n_ann)  # ties: a stable sort keeps their order
    annotated = pd.DataFrame({"name": pd.Series([f"ProfilerStep#{i}" for i in rng.permutation(n_ann)], dtype=object),
                              "start_ns": starts, "end_ns": starts + 3})
    ops_names = [f"ProfilerStep#{100 + i}" for i in range(n_old)] + ["aten::mm", "ProfilerStep#x"]
    ts = rng.integers(0, 6, size=len(ops_names))
    cpu_ops = pd.DataFrame({"name": pd.Series(ops_names, dtype=object),
                            "ts_ns": pd.array(ts, dtype=INT), "dur_ns": pd.array(ts * 0 + 2, dtype=INT)})
    old = cpu_ops.iloc[:n_old]
    _same_table(_steps_frame(annotated, cpu_ops), _steps_the_long_way(annotated, old))
    if n_ann == 0:  # a trace without annotations passes none
        _same_table(_steps_frame(None, cpu_ops), _steps_the_long_way(annotated, old))


def _runtime_the_long_way(rt: pd.DataFrame) -> pd.DataFrame:
    rt = rt[rt["correlation"].notna()]
    rt = rt.sort_values("has_grid", ascending=False, kind="stable")
    return rt.drop_duplicates("correlation", keep="first").reset_index(drop=True)


@pytest.mark.parametrize("n", [0, 1, 2, 9, 60])
@pytest.mark.parametrize("seed", range(4))
def test_runtime_by_correlation_equals_filter_sort_and_drop(n, seed):
    from pytest_gemmperf.traces.torch_frames import runtime_by_correlation

    rng = np.random.default_rng(seed)
    corr = pd.arrays.IntegerArray(rng.integers(0, max(n // 2, 1), size=n) + 2 ** 60, rng.random(n) < 0.2)
    rt = _frame({"name": [f"hipLaunch{i}" for i in range(n)], "pid": corr.copy(), "ts_ns": np.arange(n),
                 "correlation": corr, "has_grid": list(rng.random(n) < 0.5)}, n, ("name",))
    _same_table(runtime_by_correlation(rt), _runtime_the_long_way(rt))


def _lookup_the_long_way(keys: pd.Series, table_keys: pd.Series) -> np.ndarray:
    if len(table_keys) == 0:
        return np.full(len(keys), -1, dtype=np.int64)
    k = keys.astype("Int64")
    out = pd.Index(table_keys.astype("int64")).get_indexer(k.to_numpy(dtype=np.int64, na_value=0)).astype(np.int64)
    out[k.isna().to_numpy()] = -1
    return out


@pytest.mark.parametrize("n_keys, n_table", [(0, 0), (3, 0), (0, 4), (1, 1), (20, 7), (50, 50)])
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("dtype", ["Int64", "int64", "object"])
def test_lookup_equals_the_index_lookup(n_keys, n_table, seed, dtype):
    from pytest_gemmperf.traces.torch_link import lookup

    rng = np.random.default_rng(seed)
    big = 2 ** 62  # beyond float64's exact integers: neighbours must not collide
    table = pd.Series(rng.permutation(3 * n_table)[:n_table] + big, dtype="Int64")
    raw = rng.integers(0, 3 * max(n_table, 1), size=n_keys) + big
    missing = rng.random(n_keys) < 0.25 if dtype != "int64" else np.zeros(n_keys, dtype=bool)
    keys = pd.Series(pd.arrays.IntegerArray(raw, missing))
    if dtype != "Int64":
        keys = keys.astype(object) if dtype == "object" else keys.astype("int64")
    got = lookup(keys, table)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, _lookup_the_long_way(keys, table))


@pytest.mark.parametrize("in_order", ["queue", "stream"])
@pytest.mark.parametrize("n", [1, 2, 30])
@pytest.mark.parametrize("seed", range(3))
def test_queue_overlap_made_before_the_table_equals_the_tables_own(in_order, n, seed):
    from pytest_gemmperf.traces.schema import flag_queue_overlap

    rng = np.random.default_rng(seed)
    cols = _columns(rng, n)
    cols["start_ns"] = rng.integers(0, 50, size=n)  # overlapping: the flags are not all False
    cols["end_ns"] = cols["start_ns"] + rng.integers(0, 20, size=n)
    cols["pid"] = pd.arrays.IntegerArray(rng.integers(0, 2, size=n), rng.random(n) < 0.2)
    got = finalize_dispatch_columns(dict(cols), pd.RangeIndex(n), "f", in_order=in_order)
    np.testing.assert_array_equal(got["queue_overlap"].to_numpy(), flag_queue_overlap(got, in_order))
    assert got["queue_overlap"].dtype == bool and list(got.columns)[-1] == "extra_flag"


def test_a_column_on_other_rows_is_aligned_as_a_frame_aligns_it():
    rng = np.random.default_rng(5)
    n = 12
    cols = _columns(rng, n)
    cols["queue"] = pd.Series(rng.integers(0, 3, size=n), index=pd.RangeIndex(n)[::-1])
    index = pd.RangeIndex(n)
    _same_table(finalize_dispatch_columns(dict(cols), index, "f"),
                finalize_dispatches(pd.DataFrame(dict(cols), index=index), "f"))


def test_a_frame_on_other_labels_is_finalized_by_position():
    # a reader's filtered frame (labels 3, 9, 1, ...): the table comes on the default index
    cols = _columns(np.random.default_rng(7), 9)
    frame = pd.DataFrame(dict(cols), index=pd.RangeIndex(9))
    shuffled = frame.set_axis(pd.Index([3, 9, 1, 12, 4, 0, 7, 8, 20]), axis=0)
    got = finalize_dispatches(shuffled, "f")
    assert isinstance(got.index, pd.RangeIndex) and got.index.start == 0
    _same_table(got, finalize_dispatches(frame, "f"))

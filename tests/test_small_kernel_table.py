"""kernels.csv's table and summary.json's groups of a small analysis, equal to the long way.

On a trace of tens of dispatches ``gemmperf analyze`` spends its statistics and summary on
pandas' fixed costs per operation (a column set, a grouped aggregation), not on the rows: the
statistics table is made into a frame once, and summary.json's groups of a small totals table
are found in NumPy. Each shortcut is checked here against the long way it replaces, on random
tables with nulls, several categories and ties: the same values, dtypes and order.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.analysis import kernel_stats as ks
from pytest_gemmperf.analysis.intervals import group_codes, sorted_group_codes
from pytest_gemmperf.analysis.kernel_stats import DurationRows, kernel_stats, rows_kernel_stats
from pytest_gemmperf.analysis.source_totals import TOTAL_COLUMNS
from pytest_gemmperf.commands import analyze_impl
from pytest_gemmperf.commands.analyze_impl import (Inputs, _small_summary_groups, _small_totals,
                                                   _summary_groups, build_summary)
from pytest_gemmperf.jsonsafe import clean


def _stats_frame_the_long_way(keys, rep, by, stats):
    """The statistics table as it was made: the key rows, then each column set on the frame."""
    out = keys[by].iloc[rep].reset_index(drop=True)
    for c in ("count", "total_ns", "mean_ns", "median_ns", "std_ns", "min_ns", "max_ns", "p05_ns",
              "p95_ns", "iqr_ns", "mad_ns", "cv"):
        out[c] = stats[c]
    out["range_ns"] = out["max_ns"] - out["min_ns"]
    out["n_outliers"] = stats["n_outliers"]
    if "category" in keys.columns:
        out["category"] = keys["category"].iloc[rep].reset_index(drop=True)
    else:
        out["category"] = pd.Series([pd.NA] * len(out), dtype="category")
    return out[by + list(ks.STATS_COLUMNS)] if "category" not in by else out


def _dispatches(seed: int, n: int = 60) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    pick = lambda values: [values[i] for i in rng.integers(0, len(values), n)]  # noqa: E731
    rank = pd.array(pick([0, 1, 3, None]), dtype="Int64")
    return pd.DataFrame({
        "source": pd.Categorical(pick(["torch", "rocprof-csv"])),
        "point": pd.Categorical(pick(["b", "a", None]), categories=["b", "a", "z"]),
        "rank": rank,
        "kernel": pd.Categorical(pick(["k2", "k1", "k3", None])),
        "category": pd.Categorical(pick(["gemm", "memory", None])),
        # ties: few distinct durations
        "dur_ns": rng.choice([0, 5, 5, 7, 1_000_003], n).astype(np.int64),
    })


def _same_frame(got: pd.DataFrame, want: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(got, want, check_exact=True, check_categorical=True)
    for c in got.columns:
        if isinstance(got[c].dtype, pd.CategoricalDtype):
            assert got[c].cat.categories.dtype == want[c].cat.categories.dtype


BYS = [["point", "rank", "kernel"], ["source", "point", "rank", "kernel"], ["kernel", "category"], ["rank"]]


@pytest.mark.parametrize("by", BYS, ids=["-".join(b) for b in BYS])
@pytest.mark.parametrize("seed", range(4))
def test_the_statistics_table_made_once_equals_the_column_by_column_one(by, seed, monkeypatch):
    d = _dispatches(seed)
    if seed == 3 and "category" not in by:  # no category column: an all-null one
        d = d.drop(columns="category")
    got = kernel_stats(d, by=by)
    monkeypatch.setattr(ks, "_stats_frame", _stats_frame_the_long_way)
    _same_frame(got, kernel_stats(d, by=by))


def test_the_statistics_table_sets_no_column_on_a_frame(monkeypatch):
    # fifteen column sets before (each copies the frame's blocks)
    calls = []
    original = pd.DataFrame.__setitem__
    d = _dispatches(0)
    keys = d[["point", "rank", "kernel", "category"]].drop_duplicates().reset_index(drop=True)
    group = keys.reset_index().merge(d, on=list(keys.columns), how="right")["index"].to_numpy()
    rows = DurationRows(keys.fillna({"rank": -1}), group, d["dur_ns"].to_numpy())
    monkeypatch.setattr(pd.DataFrame, "__setitem__", lambda self, k, v: calls.append(k) or original(self, k, v))
    rows_kernel_stats(rows)
    assert calls == []


def _totals(seed: int, n: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    pick = lambda values: [values[i] for i in rng.integers(0, len(values), n)]  # noqa: E731
    t = pd.DataFrame({
        # categories in an order that is not the values' (groups follow the categories)
        "source": pd.Categorical(pick(["torch", "rocprof-csv", None] if seed % 2 else ["torch", "rocprof-csv"]),
                                 categories=["torch", "rocprof-json", "rocprof-csv"]),
        "point": pd.Categorical(pick(["p2", "p1", None]), categories=["p2", "p1", "p0"]),
        "rank": pd.array(pick([2, 0, None, -5]), dtype="Int64"),
        "kernel": pd.Categorical(pick(["k1", "k2"])),
        "category": pd.Categorical(pick(["gemm", "memory", "other", None])),
    })
    for c in TOTAL_COLUMNS:  # ties and values beyond float64's exact integers
        t[c] = rng.choice([0, 1, 2**60 + 1, 3], n).astype(np.int64)
    return t


@pytest.mark.parametrize("n", [1, 5, 40, 300])
@pytest.mark.parametrize("seed", range(6))
def test_the_small_summary_groups_equal_pandas(seed, n):
    t = _totals(seed, n)
    assert _small_totals(t)
    got, want = _small_summary_groups(t), _summary_groups(t)
    # as summary.json holds them: the same text (keys, order, values, nulls)
    assert json.dumps(clean(got)) == json.dumps(clean(want))
    assert list(got[1]) == list(want[1])


def test_a_totals_table_of_other_dtypes_or_size_takes_pandas_path(monkeypatch):
    t = _totals(0, 20)
    assert not _small_totals(t.astype({"point": object}))
    assert not _small_totals(t.iloc[:0])
    monkeypatch.setattr(analyze_impl, "SMALL_TABLE_ROWS", 19)
    assert not _small_totals(t)


def test_a_small_summary_runs_no_grouped_aggregation(monkeypatch):
    # pandas' groupby was most of a small summary's cost (six named aggregations, three groupbys)
    def refuse(*_a, **_k):
        raise AssertionError("groupby on a small totals table")

    t = _totals(1, 30)
    monkeypatch.setattr(pd.DataFrame, "groupby", refuse)
    args = argparse.Namespace(paths=["x"], warmup=0, categories=None)
    inputs = Inputs(totals=t, agents=pd.DataFrame({"source": pd.Categorical([])}), notes=[], sources=[])
    summary = build_summary(args, inputs, pd.DataFrame({"x": [1]}))
    assert summary["agents"] == []
    assert summary["n_dispatches"] == int(t["n_dispatches"].sum())


def _keys(seed: int, n: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    pick = lambda values: [values[i] for i in rng.integers(0, len(values), n)]  # noqa: E731
    return pd.DataFrame({
        "source": pd.Categorical(pick(["torch", "rocprof-csv"]), categories=["torch", "x", "rocprof-csv"]),
        "point": pd.Categorical(pick(["b", "a", None]), categories=["b", "a"]),
        "rank": pd.array(pick([3, 0, None, -1]), dtype="Int64"),
        "kernel": pd.Series(pick(["k2", "k1", None, "K0"]), dtype=object),
        "name": pd.Series(pick(["z", "y", None]), dtype="str"),
        "n": rng.integers(-2, 3, n),
    })


KEY_SETS = [["point", "rank", "kernel"], ["source", "point", "rank", "kernel"], ["rank"], ["name", "n"],
            ["kernel", "source", "name", "point", "rank", "n"]]


@pytest.mark.parametrize("numbering,sort", [(sorted_group_codes, True), (group_codes, False)],
                         ids=["sorted", "first-seen"])
@pytest.mark.parametrize("keys", KEY_SETS, ids=["-".join(k) for k in KEY_SETS])
@pytest.mark.parametrize("n", [0, 1, 7, 200])
@pytest.mark.parametrize("seed", range(3))
def test_group_codes_equal_a_groupby_ngroup(keys, n, seed, numbering, sort):
    df = _keys(seed, n)
    want = df.groupby(keys, dropna=False, observed=True, sort=sort).ngroup().to_numpy()
    got = numbering(df, keys)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


def test_group_codes_of_too_many_combinations_take_the_groupby():
    rng = np.random.default_rng(1)
    df = pd.DataFrame({c: rng.permutation(5_000) for c in "abcde"})
    want = df.groupby(list("abcde"), sort=False).ngroup().to_numpy()
    np.testing.assert_array_equal(group_codes(df, list("abcde")), want)


def test_sorted_group_codes_too_many_combinations_take_the_groupby():
    # five columns of 5,000 distinct values: their combined number would not fit in int64
    rng = np.random.default_rng(0)
    df = pd.DataFrame({c: rng.permutation(5_000) for c in "abcde"})
    want = df.groupby(list("abcde"), sort=True).ngroup().to_numpy()
    np.testing.assert_array_equal(sorted_group_codes(df, list("abcde")), want)


def _duration_rows(seed: int, n_keys: int, n_rows: int, *, object_point: bool = False) -> DurationRows:
    """Random duration rows: keys repeating (two sources' keys concatenated), nulls in every
    key column, a rank of -1 beside null ranks, tied and zero durations."""
    rng = np.random.default_rng(seed)
    pick = lambda values: [values[i] for i in rng.integers(0, len(values), n_keys)]  # noqa: E731
    point = pick(["p2", "\x00no-point"] if seed % 3 == 0 else ["p2", "p1", None])
    keys = pd.DataFrame({
        "source": pd.Categorical(pick(["torch", "rocprof-csv", None]), categories=["torch", "x", "rocprof-csv"]),
        "point": pd.Series(point, dtype=object) if object_point else pd.Categorical(point),
        "rank": pd.array(pick([2, 0, None, -1, 10]), dtype="Int64"),
        "kernel": pd.Categorical(pick(["k_b", "k_a", "k_c", None])),
        "category": pd.Categorical(pick(["gemm", "memory", None]), categories=["memory", "gemm", "other"]),
    })
    # every key shows in order first, then rows of any key
    group = np.concatenate([np.arange(n_keys), rng.integers(0, n_keys, n_rows)]).astype(np.uint16)
    dur = ks.packed(rng.choice([0, 3, 3, 1000, 1001, 2**40 + 7], len(group)).astype(np.int64))
    return DurationRows(keys, group, dur)


@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("object_point", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_the_small_kernel_table_equals_the_frame_by_frame_one(seed, object_point, mixed, monkeypatch):
    rows = _duration_rows(seed, n_keys=[1, 3, 12, 40, 200, 7][seed], n_rows=[0, 5, 60, 300, 2000, 9][seed],
                          object_point=object_point)
    got = analyze_impl.rows_kernel_table(rows, mixed=mixed)
    monkeypatch.setattr(analyze_impl, "SMALL_TABLE_ROWS", 0)
    want = analyze_impl.rows_kernel_table(DurationRows(rows.keys, rows.group, rows.dur_ns), mixed=mixed)
    _same_frame(got, want)
    assert got.to_csv() == want.to_csv()


def test_the_small_kernel_table_sorts_no_frame(monkeypatch):
    # before: the statistics' frame, the keys restored on a copy of it (two more column sets),
    # its columns reordered, then sorted as a frame
    rows = _duration_rows(1, 12, 60)
    called = []
    for name in ("sort_values", "__setitem__"):
        original = getattr(pd.DataFrame, name)
        monkeypatch.setattr(pd.DataFrame, name,
                            lambda self, *a, _f=original, _n=name, **k: called.append(_n) or _f(self, *a, **k))
    analyze_impl.rows_kernel_table(rows, mixed=False)
    assert "sort_values" not in called
    assert called.count("__setitem__") <= 2  # the keys' nulls filled (point, rank)

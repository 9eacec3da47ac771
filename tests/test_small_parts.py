"""The report parts and GEMM views of a small input are built from picked arrays rather than
pandas' frame operations (a row selection, column sets, concatenations, a categorical
comparison, a factorization): each gives what the long way gives, value and dtype alike, on
random tables (nulls, ties, one row, empty, integer kinds, text)."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.analysis import intervals as I
from pytest_gemmperf.analysis import report_parts as R
from pytest_gemmperf.analysis.overlap import category_mask, overlap_fraction
from pytest_gemmperf.analysis.timeline import gpu_timeline


def _same_frame(got: pd.DataFrame, want: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert [str(t) for t in got.dtypes] == [str(t) for t in want.dtypes]
    assert got.to_csv() == want.to_csv()


def _column(rng: random.Random, kind: str, n: int):
    if kind == "cat":
        return pd.Categorical([rng.choice(["z", "a", None]) for _ in range(n)], categories=["z", "q", "a"])
    if kind == "Int64":
        return pd.array([rng.choice([3, -1, 0, None]) for _ in range(n)], dtype="Int64")
    if kind == "Int8":
        return pd.array([rng.choice([3, -128, None]) for _ in range(n)], dtype="Int8")
    if kind == "int":
        return np.array([rng.choice([2**62, -(2**62), 0, 5]) for _ in range(n)], dtype=np.int64)
    if kind == "int16":
        return np.array([rng.choice([7, -3]) for _ in range(n)], dtype=np.int16)
    if kind == "uint":
        return np.array([rng.choice([2**63 + 1, 0]) for _ in range(n)], dtype=np.uint64)
    if kind == "str":
        return pd.array([rng.choice(["b", "a", None, "é", "Z"]) for _ in range(n)], dtype="str")
    if kind == "string":
        return pd.array([rng.choice(["b", "a", None, "Z"]) for _ in range(n)], dtype="string")
    return pd.array([rng.choice(["b", None, "a"]) for _ in range(n)], dtype=object)


KINDS = ["cat", "Int64", "Int8", "int", "int16", "uint", "str", "string", "obj"]


@pytest.mark.parametrize("seed", range(4))
def test_group_codes_of_every_key_kind_and_of_rows_are_ngroup(seed):
    rng = random.Random(seed)
    for _ in range(150):
        n = rng.choice([0, 1, 2, 9, 40])
        keys = rng.sample(KINDS, rng.randint(1, 3))
        df = pd.DataFrame({k: _column(rng, k, n) for k in keys})
        for sort, numbering in ((False, I.group_codes), (True, I.sorted_group_codes)):
            want = df.groupby(keys, observed=True, dropna=False, sort=sort).ngroup().to_numpy()
            np.testing.assert_array_equal(numbering(df, keys), want)
        rows = np.array(sorted(rng.sample(range(n), rng.randint(0, n))), dtype=np.int64)
        sub = df.iloc[rows]
        want = sub.groupby(keys, observed=True, dropna=False, sort=False).ngroup().to_numpy()
        got = I.group_codes(df, keys, rows=rows)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)


def test_category_mask_of_a_categorical_is_the_comparison():
    rng = random.Random(3)
    for cats in (["gemm", "other"], ["other"], ["gemm"], []):
        for n in (0, 1, 7):
            values = pd.Categorical([rng.choice(cats + [None]) for _ in range(n)], categories=cats + ["x"])
            for d in (pd.DataFrame({"category": values}), pd.DataFrame({"category": values.astype(object)})):
                for category in ("gemm", "collective", "x"):
                    want = (d["category"] == category).to_numpy(dtype=bool, na_value=False)
                    got = category_mask(d, None, category)
                    assert got.dtype == bool
                    np.testing.assert_array_equal(got, want)


def _dispatches(rng: random.Random, n: int) -> pd.DataFrame:
    start = np.cumsum([rng.choice([0, 3, 50]) for _ in range(n)]).astype(np.int64)
    dur = np.array([rng.choice([0, 5, 7, 40]) for _ in range(n)], dtype=np.int64)
    return pd.DataFrame({
        "point": pd.Categorical([rng.choice(["p1", "p0", None]) for _ in range(n)]),
        "rank": pd.array([rng.choice([0, 1, None]) for _ in range(n)], dtype="Int64"),
        "host": pd.Categorical([rng.choice(["h", None]) for _ in range(n)]),
        "pid": pd.array([rng.choice([1, 2]) for _ in range(n)], dtype="Int64"),
        "kernel": pd.Categorical([rng.choice(["Cijk_gemm", "ncclKernel_x", "elementwise"]) for _ in range(n)]),
        "kernel_short": pd.Categorical([rng.choice(["short", None]) for _ in range(n)]),
        "category": pd.Categorical([rng.choice(["gemm", "collective", "other", None]) for _ in range(n)]),
        "start_ns": start, "end_ns": start + dur, "dur_ns": dur,
    })


def test_report_part_tables_are_the_long_ways():
    rng = random.Random(5)
    for n in (1, 2, 9, 40):
        for _ in range(8):
            d = _dispatches(rng, n)
            part = R.report_part(d)
            _same_frame(part.timeline, R.decategorized(gpu_timeline(d)))
            gm = category_mask(d, None, "gemm")
            if part.gemm is None:
                assert not gm.any()
                continue
            gi = np.flatnonzero(gm)
            keys = list(R.GEMM_KEYS)
            group = d[keys].iloc[gi].groupby(keys, observed=True, dropna=False, sort=False).ngroup().to_numpy()
            np.testing.assert_array_equal(part.gemm.group, group)
            first = np.unique(group, return_index=True)[1]
            _same_frame(part.gemm.keys, d[keys].iloc[gi[first]].reset_index(drop=True))
            assert part.gemm.warm.all()
            if part.comm is not None:  # the names read back as the categorical the long way made
                ci = np.flatnonzero(category_mask(d, None, "collective"))
                short = d["kernel_short"].astype(object)
                names = short.where(short.notna(), d["kernel"].astype(object)).iloc[ci]
                want = np.asarray(names.astype("category").array, dtype=object)
                assert np.asarray(part.comm.name, dtype=object).tolist() == want.tolist()


def _gemm_frame_long_way(gemm: R.GemmRows) -> pd.DataFrame:
    out = gemm.keys.iloc[gemm.group].reset_index(drop=True)
    dur = gemm.dur_ns.astype(np.int64)
    start = gemm.start_ns.astype(np.int64)
    out["dur_ns"] = dur
    out["start_ns"] = start
    out["end_ns"] = start + dur
    overlap = gemm.overlap_ns.astype(np.int64)
    out["overlap_ns"] = overlap
    out["overlap_fraction"] = overlap_fraction(overlap, dur)
    out["gpu"] = gemm.gpu.astype(np.int64)
    out.index = pd.Index(gemm.row.astype(np.int64))
    return out


def _collective_frame_long_way(gemm: pd.DataFrame, comm: R.CommRows) -> tuple[pd.DataFrame, np.ndarray]:
    names = np.asarray(comm.name, dtype=object)
    c = pd.DataFrame({"gpu": comm.gpu.astype(np.int64), "start_ns": comm.start_ns, "end_ns": comm.end_ns,
                      "kernel_short": names, "kernel": names}, index=pd.Index(comm.row.astype(np.int64)))
    g = gemm[["gpu", "start_ns", "end_ns"]].assign(kernel_short=None, kernel=None)
    both = pd.concat([g, c])
    mask = np.zeros(len(both), dtype=bool)
    mask[len(g):] = True
    order = np.argsort(both.index.to_numpy(), kind="stable")
    return both.iloc[order], mask[order]


def test_gemm_and_collective_frames_are_the_long_ways():
    rng = random.Random(6)
    seen = 0
    for n in (1, 3, 12, 60):
        for _ in range(10):
            part = R.report_part(_dispatches(rng, n))
            if part.gemm is None:
                continue
            g = R.gemm_frame(part.gemm)
            _same_frame(g, _gemm_frame_long_way(part.gemm))
            if part.comm is None:
                continue
            seen += 1
            for rows in (g, g.iloc[:1], g.iloc[:0]):
                got, got_mask = R.collective_frame(rows, part.comm)
                want, want_mask = _collective_frame_long_way(rows, part.comm)
                _same_frame(got.astype({"kernel_short": object, "kernel": object}), want)
                np.testing.assert_array_equal(got_mask, want_mask)
    assert seen

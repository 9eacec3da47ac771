"""Top-K variance ranking, aorta's timestamp/overlap columns and spread across processes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.analysis.variance import (
    AORTA_COLUMNS, OVERLAP_COLUMNS, TIMESTAMP_COLUMNS, parse_point_axes, select_samples,
    spread_across, top_variance, with_collective_overlap, with_timestamps,
)
from pytest_gemmperf.traces.schema import finalize_dispatches

# durations (ns) per kernel; SPIKY has one outlier (large range, tiny MAD), BROAD is spread out
SPIKY = [100, 100, 100, 100, 100, 101, 99, 100, 1000]
BROAD = [60, 80, 100, 120, 140, 160, 180, 200, 220]
STEADY = [50, 50, 51, 50, 49, 50, 50, 50, 50]


def sweep_table() -> pd.DataFrame:
    """Two points x two ranks, three GEMM kernels, one collective per process."""
    rows = []
    pid = 100
    for point in ("ch28-th256", "ch56-th512"):
        for rank in (0, 1):
            pid += 1
            t = 0
            scale = 1.0 + 0.1 * rank + (0.5 if point == "ch56-th512" else 0.0)
            for i in range(9):
                for name, durs in (("Cijk_SPIKY", SPIKY), ("Cijk_BROAD", BROAD),
                                   ("Cijk_STEADY", STEADY)):
                    dur = int(durs[i] * scale)
                    rows.append((point, rank, pid, name, t, t + dur))
                    t += dur + 10
            rows.append((point, rank, pid, "ncclDevKernel_Generic_1", 0, 5))
    df = pd.DataFrame(rows, columns=["point", "rank", "pid", "kernel", "start_ns", "end_ns"])
    df["host"] = "h"
    df["agent"] = 0
    df["file"] = "rank" + df["rank"].astype(str) + "_" + df["point"] + ".json"
    return finalize_dispatches(df, None)


@pytest.fixture(scope="module")
def table():
    return sweep_table()


def test_parse_point_axes():
    got = parse_point_axes(pd.Series(["ch28-th256", "th512", "ch56-th512-algoRing", None, "x"]))
    assert got["channel"].tolist() == [28, pd.NA, 56, pd.NA, pd.NA]
    assert got["threads"].tolist() == [256, 512, 512, pd.NA, pd.NA]


def test_top_variance_range_columns_and_values(table):
    top = top_variance(table, k=2)
    assert list(top.columns[:7]) == list(AORTA_COLUMNS)
    for c in ("point", "median_us", "mad_cv", "iqr_cv", "count", "min_row", "max_row"):
        assert c in top.columns
    assert len(top) == 4 * 2  # top-2 per (point, rank) cell
    assert top["time_diff_us"].is_monotonic_decreasing
    first = top.iloc[0]  # the biggest range: SPIKY at the slowest cell (ch56, rank 1)
    assert first["kernel_name"] == "Cijk_SPIKY"
    assert (first["threads"], first["channel"], first["rank"]) == (512, 56, 1)
    assert first["kernel_time_max_us"] == pytest.approx(int(1000 * 1.6) / 1e3)
    assert first["time_diff_us"] == pytest.approx((int(1000 * 1.6) - int(99 * 1.6)) / 1e3)
    cell = top[(top["point"] == "ch28-th256") & (top["rank"] == 0)]
    assert cell["kernel_name"].tolist() == ["Cijk_SPIKY", "Cijk_BROAD"]
    spiky = cell.iloc[0]
    assert spiky["median_us"] == pytest.approx(0.1)
    assert spiky["mad_cv"] == pytest.approx(1.4826 * 0 / 100)  # MAD of SPIKY is 0
    broad = cell.iloc[1]
    assert broad["mad_cv"] == pytest.approx(1.4826 * 40 / 140)
    assert broad["iqr_cv"] == pytest.approx((180 - 100) / 1.349 / 140)
    assert broad["count"] == 9


def test_top_variance_robust_sort_prefers_broad(table):
    top = top_variance(table, k=1, sort_by="robust")
    assert set(top["kernel_name"]) == {"Cijk_BROAD"}
    with pytest.raises(ValueError, match="sort_by"):
        top_variance(table, sort_by="stddev")


def test_warmup_drops_first_invocations(table):
    kept = select_samples(table, warmup=2)
    assert len(kept) == len(select_samples(table)) - 4 * 3 * 2
    top = top_variance(table, k=3, warmup=2)
    assert set(top["count"]) == {7}
    spiky = top[(top["kernel_name"] == "Cijk_SPIKY") & (top["point"] == "ch28-th256")
                & (top["rank"] == 0)].iloc[0]
    assert spiky["kernel_time_min_us"] == pytest.approx(0.099)


def test_axes_table_overrides_parsing(table):
    axes = pd.DataFrame({"point": ["ch28-th256", "ch56-th512"], "threads": [1, 2],
                         "channels": [3, 4], "algo": ["Ring", "Tree"]})
    top = top_variance(table, k=1, axes=axes)
    row = top[top["point"] == "ch56-th512"].iloc[0]
    assert (row["threads"], row["channel"], row["algo"]) == (2, 4, "Tree")


def test_with_timestamps(table):
    top = with_timestamps(top_variance(table, k=1), table)
    for c in TIMESTAMP_COLUMNS:
        assert c in top.columns
    row = top.iloc[0]
    lo, hi = table.loc[row["min_row"]], table.loc[row["max_row"]]
    assert row["min_duration_found_us"] == pytest.approx(row["kernel_time_min_us"])
    assert row["max_duration_found_us"] == pytest.approx(row["kernel_time_max_us"])
    assert row["min_duration_timestamp_ms"] == pytest.approx(lo["start_ns"] / 1e6)
    gap_ms = abs(hi["start_ns"] - lo["start_ns"]) / 1e6
    assert row["time_between_min_max_ms"] == pytest.approx(gap_ms)
    with pytest.raises(ValueError, match="top_variance"):
        with_timestamps(top.drop(columns="min_row"), table)


def test_with_collective_overlap_max_instance():
    rows = [("Cijk_G", 0, 10, 1), ("Cijk_G", 100, 200, 1),  # max instance [100, 200)
            ("ncclDevKernel_Generic_1", 90, 150, 1),  # 50 % of it
            ("ncclAllGather", 120, 130, 1),  # nested: 10 %, already inside the first
            ("ncclDevKernel_Generic_1", 190, 400, 1),  # 10 %
            ("ncclDevKernel_Generic_1", 100, 200, 2),  # other process: ignored
            ("ncclDevKernel_Generic_1", 200, 300, 1)]  # touches the end: no overlap
    df = pd.DataFrame(rows, columns=["kernel", "start_ns", "end_ns", "pid"])
    d = finalize_dispatches(df.assign(point="ch28-th256", rank=0, agent=0), "x.json")
    top = with_collective_overlap(top_variance(d, k=1), d)
    for c in OVERLAP_COLUMNS:
        assert c in top.columns
    row = top.iloc[0]
    assert row["overlapping_collective_count"] == 3
    assert row["overlapping_collective_names"] == (
        "ncclDevKernel_Generic_1;ncclAllGather;ncclDevKernel_Generic_1")
    assert row["max_overlap_percentage"] == pytest.approx(50.0)
    assert row["max_overlap_collective"] == "ncclDevKernel_Generic_1"
    assert row["total_overlap_duration_ms"] == pytest.approx(60 / 1e6)  # [100,150) ∪ [190,200)


def test_spread_across_ranks(table):
    sp = spread_across(table, across=("rank",), category="gemm")
    row = sp[(sp["kernel"] == "Cijk_BROAD") & (sp["point"] == "ch28-th256")].iloc[0]
    assert row["n_units"] == 2
    assert row["min_median_us"] == pytest.approx(0.140)
    assert row["max_median_us"] == pytest.approx(int(140 * 1.1) / 1e3)
    assert row["spread_ratio"] == pytest.approx(int(140 * 1.1) / 140)
    assert row["slowest_rank"] == 1
    pooled = spread_across(table, category="gemm")
    assert set(pooled["n_units"]) == {4}
    assert "point" not in pooled.columns and "slowest_point" in pooled.columns
    with pytest.raises(ValueError, match="across"):
        spread_across(table, across=("host",))


def test_908_top_variance_real(shared_data):
    path = shared_data / "tracelens" / "908_results.json.gz"
    if not path.exists():
        pytest.skip(f"real-data test: {path} is absent")
    from pytest_gemmperf.traces.rocprof_json import read_rocprof_json

    d = read_rocprof_json(path).dispatches
    top = with_collective_overlap(with_timestamps(top_variance(d, k=5), d), d)
    assert len(top) == 5
    gemm = d[d["category"] == "gemm"]
    spans = gemm.groupby("kernel", observed=True)["dur_ns"].agg(lambda s: s.max() - s.min())
    np.testing.assert_allclose(top["time_diff_us"].to_numpy(),
                               np.sort(spans.to_numpy())[::-1][:5] / 1e3)
    assert (top["max_duration_found_us"] == top["kernel_time_max_us"]).all()
    assert top["overlapping_collective_names"].isin(["", "ncclDevKernel_Generic_1"]).all()


@pytest.mark.parametrize("seed", range(6))
def test_small_table_statistics_match_the_grouped_passes_bit_for_bit(seed):
    """A small table's statistics come from one NumPy sort; they equal pandas' grouped median,
    quantiles, MAD and first-instance idxmin/idxmax exactly, whatever the keys (categorical,
    nullable, missing), durations (ties, equal, near 2**40) or index labels."""
    from pytest_gemmperf.analysis import variance as V

    rng = np.random.default_rng(seed)
    for trial in range(60):
        n = int(rng.integers(1, 80))
        names = [f"k{i}" for i in range(int(rng.integers(1, 5)))] + ([None] if trial % 3 == 0 else [])
        kern = rng.choice(np.array(names, dtype=object), n)
        d = pd.DataFrame({
            "point": pd.Categorical(rng.choice(np.array(["ch1-th2", "ch2-th4", None], dtype=object), n)),
            "rank": pd.array(rng.choice(np.array([0, 1, None], dtype=object), n), dtype="Int64"),
            "kernel": pd.Categorical(kern) if trial % 2 else pd.Series(kern, dtype=object),
            "dur_ns": [rng.integers(1, 10, n), rng.integers(1, 2**40, n), np.full(n, 7)][trial % 3].astype(np.int64),
            "start_ns": rng.integers(0, 20, n).astype(np.int64),
        })
        if trial % 5 == 0:
            d.index = rng.permutation(n) + 100
        by = [["point", "rank", "kernel"], ["kernel"], ["point", "kernel"], ["rank"]][trial % 4]
        if trial % 6 == 1:  # one group: pandas' sorted-ids paths
            d = d.assign(point="ch1-th2", rank=0, kernel="k0")
        frame = d[by + ["dur_ns", "start_ns"]].sort_values("start_ns", kind="stable")
        grp = frame.groupby(by, observed=True, dropna=False, sort=True)["dur_ns"]
        pd.testing.assert_frame_equal(V._stats(d, by), V._stats_pandas(frame, by, grp), check_exact=True)


def test_point_axes_read_as_pandas_reads_them():
    """Point ids parsed with ``re`` per distinct id give what pandas' ``str.extract`` and
    ``to_numeric`` give: first match, leading zeros, missing and empty ids, categoricals, any
    index; ids pandas reads otherwise (not text, non-ASCII or long digit runs) take its path."""
    def pandas_axes(points):
        text = points.astype("object").where(points.notna(), "").astype(str)

        def grab(abbr):
            found = text.str.extract(rf"(?:^|-){abbr}(\d+)(?:-|$)", expand=False)
            return pd.to_numeric(found, errors="coerce").astype("Int64")

        return pd.DataFrame({"threads": grab("th"), "channel": grab("ch")}, index=points.index)

    ids = ["ch2-th256", "th4", "ch08-th0016", "x-ch3", "", None, "th-ch", "ch1-th2-th3", "thx-th5",
           "th123456789012345", "th1234567890123456", "th٣", "ch5-th6-extra"]
    for points in (pd.Series(ids, dtype=object), pd.Series(pd.Categorical(ids)), pd.Series(ids, dtype="str"),
                   pd.Series(ids[:3], index=[7, 3, 5], dtype=object), pd.Series([], dtype=object),
                   pd.Series([None, None], dtype=object), pd.Series([1.0, np.nan]), pd.Series([b"th1"], dtype=object)):
        pd.testing.assert_frame_equal(parse_point_axes(points), pandas_axes(points), check_exact=True)

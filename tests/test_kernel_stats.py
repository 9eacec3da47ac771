"""Per-kernel statistics: rocprofv3 --stats equivalence per version, and numpy cross-checks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import FIXTURES, shared_file
from pytest_gemmperf.analysis.kernel_stats import (
    ROCPROF_STATS_COLUMNS,
    STATS_COLUMNS,
    drop_warmup,
    kernel_stats,
    rocprof_style_stats,
)
from pytest_gemmperf.traces.rocprof_csv import read_kernel_stats_csv, read_kernel_trace_csv

FX = FIXTURES / "rocprof_csv"


@pytest.mark.parametrize("prefix", ["v6.2/3141", "v6.3/node-a/5926", "v7/mi350-n1/5358"])
def test_rocprof_style_stats_match_kernel_stats_csv(prefix):
    trace = read_kernel_trace_csv(FX / f"{prefix}_kernel_trace.csv")
    ref = read_kernel_stats_csv(FX / f"{prefix}_kernel_stats.csv")
    ours = rocprof_style_stats(trace.dispatches)
    assert list(ours.columns) == list(ROCPROF_STATS_COLUMNS)
    # same kernels, same order (TotalDurationNs descending)
    assert ours["Name"].tolist() == ref["Name"].tolist()
    for col in ("Calls", "TotalDurationNs", "MinNs", "MaxNs"):
        assert ours[col].astype("int64").tolist() == ref[col].astype("int64").tolist(), col
    np.testing.assert_allclose(ours["AverageNs"], ref["AverageNs"], rtol=1e-6)
    np.testing.assert_allclose(ours["StdDev"], ref["StdDev"], rtol=1e-6, atol=1e-9)
    # Percentage is printed with 2-6 significant decimals
    np.testing.assert_allclose(ours["Percentage"], ref["Percentage"], rtol=1e-3, atol=5e-3)
    assert ours["Percentage"].sum() == pytest.approx(100.0)


def test_rocprofv3_stddev_is_the_sample_stddev():
    # 6.2 documented sample: hipFree called twice, 10900 and 54371 ns (Min/Max of 2 calls)
    s = read_kernel_stats_csv(shared_file(
        "rocprofv3/ROCm_rocprofiler-sdk/rocm-6.2.0/extracted_24189_hip_stats.csv"))
    row = s[s["Name"] == "hipFree"].iloc[0]
    assert (row["Calls"], row["MinNs"], row["MaxNs"]) == (2, 10900, 54371)
    d = pd.DataFrame({"kernel": pd.Categorical(["hipFree", "hipFree"]), "dur_ns": [10900, 54371]})
    ours = rocprof_style_stats(d).iloc[0]
    assert ours["StdDev"] == pytest.approx(row["StdDev"], rel=1e-9)
    assert ours["StdDev"] != pytest.approx(np.std([10900, 54371]), rel=1e-3)  # not population


def test_single_call_stddev_is_zero_like_rocprofv3():
    d = pd.DataFrame({"kernel": pd.Categorical(["a"]), "dur_ns": [123]})
    assert rocprof_style_stats(d)["StdDev"].tolist() == [0.0]


def _random_dispatches(seed=0, n=4000):
    rng = np.random.default_rng(seed)
    kernels = np.array(["gemm<float, 4>(float*, int)", "nccl", "copy", "norm"])
    df = pd.DataFrame({
        "point": pd.Categorical(rng.choice(["ch28-th256", "ch56-th512"], n)),
        "rank": pd.array(rng.choice([0, 1, -1], n), dtype="Int64"),
        "kernel": pd.Categorical(rng.choice(kernels, n)),
        "start_ns": rng.permutation(np.arange(n, dtype=np.int64) * 1000),
        "dur_ns": np.round(rng.lognormal(9, 0.5, n)).astype(np.int64),
    })
    df.loc[df["rank"] == -1, "rank"] = pd.NA  # a missing key must form its own group
    df["category"] = pd.Categorical(df["kernel"].astype(str).str[:4])
    df.loc[rng.choice(n, 5, replace=False), "dur_ns"] *= 40  # a few far outliers
    return df


def test_kernel_stats_against_numpy():
    df = _random_dispatches()
    out = kernel_stats(df)
    assert list(out.columns) == ["point", "rank", "kernel", *STATS_COLUMNS]
    assert out["count"].sum() == len(df)
    assert out["rank"].isna().any()
    for _, row in out.iterrows():
        sel = (df["point"] == row["point"]) & (df["kernel"] == row["kernel"])
        sel &= df["rank"].isna() if pd.isna(row["rank"]) else (df["rank"] == row["rank"]).fillna(False)
        x = df.loc[sel, "dur_ns"].to_numpy()
        q1, q3 = np.percentile(x, [25, 75])
        med = np.median(x)
        assert row["count"] == len(x)
        assert row["total_ns"] == x.sum()
        assert row["min_ns"] == x.min() and row["max_ns"] == x.max()
        assert row["range_ns"] == x.max() - x.min()
        assert row["mean_ns"] == pytest.approx(x.mean(), rel=1e-12)
        assert row["median_ns"] == pytest.approx(med)
        assert row["std_ns"] == pytest.approx(np.std(x, ddof=1), rel=1e-9)
        assert row["p05_ns"] == pytest.approx(np.percentile(x, 5))
        assert row["p95_ns"] == pytest.approx(np.percentile(x, 95))
        assert row["iqr_ns"] == pytest.approx(q3 - q1)
        assert row["mad_ns"] == pytest.approx(np.median(np.abs(x - med)))
        assert row["cv"] == pytest.approx(np.std(x, ddof=1) / x.mean(), rel=1e-9)
        assert row["n_outliers"] == int((x > q3 + 3 * (q3 - q1)).sum())
        assert row["category"] == str(row["kernel"])[:4]
    assert out["n_outliers"].sum() >= 5


def test_kernel_stats_single_dispatch_and_custom_keys():
    df = pd.DataFrame({"kernel": pd.Categorical(["a", "b", "b"]), "dur_ns": [5, 10, 14],
                       "start_ns": [0, 10, 20]})
    out = kernel_stats(df, by=("kernel",))
    a = out[out["kernel"] == "a"].iloc[0]
    assert a["count"] == 1 and np.isnan(a["std_ns"]) and a["mad_ns"] == 0
    assert out["category"].isna().all()
    b = out[out["kernel"] == "b"].iloc[0]
    assert (b["median_ns"], b["std_ns"]) == (12.0, pytest.approx(np.sqrt(8)))


def test_warmup_drops_first_dispatches_per_kernel_and_process():
    # two processes (pid 1, 2), rows deliberately out of start order
    df = pd.DataFrame({
        "host": pd.Categorical(["h"] * 8),
        "pid": pd.array([1, 1, 1, 2, 2, 2, 1, 2], dtype="Int64"),
        "kernel": pd.Categorical(["k"] * 6 + ["j", "j"]),
        "start_ns": [30, 10, 20, 300, 100, 200, 5, 50],
        "dur_ns": [3, 1000, 2, 30, 2000, 20, 7, 8],
    })
    kept = drop_warmup(df, 1)
    # the earliest 'k' of each pid (durations 1000 and 2000) and the only 'j' of each pid go
    assert sorted(kept["dur_ns"].tolist()) == [2, 3, 20, 30]
    out = kernel_stats(df, by=("pid", "kernel"), warmup=1)
    assert out["count"].tolist() == [2, 2] and out["max_ns"].tolist() == [3, 30]
    assert len(drop_warmup(df, 0)) == 8 and len(drop_warmup(df, 10)) == 0


def test_kernel_stats_on_fixture_trace_matches_rocprof_view():
    d = read_kernel_trace_csv(FX / "v7" / "mi350-n1" / "5358_kernel_trace.csv").dispatches
    ks = kernel_stats(d)
    rs = rocprof_style_stats(d).set_index("Name")
    assert ks["point"].isna().all() and ks["rank"].isna().all()  # null keys kept
    for _, row in ks.iterrows():
        ref = rs.loc[str(row["kernel"])]
        assert row["count"] == ref["Calls"] and row["total_ns"] == ref["TotalDurationNs"]
        if row["count"] > 1:
            assert row["std_ns"] == pytest.approx(ref["StdDev"], rel=1e-9)
    assert set(ks["category"].astype(str)) == {"gemm", "collective", "elementwise", "memory"}


def test_kernel_stats_empty_input():
    df = pd.DataFrame({"point": pd.Categorical([]), "rank": pd.array([], dtype="Int64"),
                       "kernel": pd.Categorical([]), "dur_ns": np.array([], dtype=np.int64),
                       "start_ns": np.array([], dtype=np.int64)})
    out = kernel_stats(df)
    assert len(out) == 0 and "n_outliers" in out.columns


def test_kernel_stats_missing_column():
    with pytest.raises(KeyError, match="lack columns"):
        kernel_stats(pd.DataFrame({"kernel": ["a"], "dur_ns": [1]}))

"""Interval algebra and GEMM/collective overlap, checked against brute-force references."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.analysis import intervals as iv
from pytest_gemmperf.analysis.overlap import gemm_overlap, overlap_by_kernel
from pytest_gemmperf.traces.schema import finalize_dispatches

HORIZON = 80
SEEDS = [0, 1, 2, 3, 7, 11]


def random_intervals(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Random intervals with touching, nested, duplicate and zero-length members."""
    s = rng.integers(0, HORIZON - 30, n)
    e = s + rng.choice([0, 0, 1, 2, 3, 5, 10, 25], n)
    k = n // 4
    i = rng.integers(0, n, k)
    touch_s, touch_e = e[i], e[i] + rng.integers(0, 6, k)  # starts where another ends
    j = rng.integers(0, n, k)
    nest_s, nest_e = s[j] + (e[j] - s[j]) // 3, e[j] - (e[j] - s[j]) // 3  # inside another
    dup = rng.integers(0, n, 2)
    s = np.concatenate([s, touch_s, nest_s, s[dup]])
    e = np.concatenate([e, touch_e, np.maximum(nest_e, nest_s), e[dup]])
    p = rng.permutation(len(s))
    return s[p].astype(np.int64), e[p].astype(np.int64)


def cells(s, e) -> np.ndarray:
    """Brute force: unit cells [t, t+1) covered by any interval."""
    out = np.zeros(HORIZON + 40, dtype=bool)
    for a, b in zip(s, e):
        out[a:b] = True
    return out


def cells_of_union(u) -> np.ndarray:
    return cells(*u)


def assert_union(u) -> None:
    s, e = u
    assert np.all(e > s), "union holds a zero-length interval"
    assert np.all(s[1:] > e[:-1]), "union is not sorted, disjoint and merged"


@pytest.mark.parametrize("seed", SEEDS)
def test_merge_matches_bruteforce(seed):
    rng = np.random.default_rng(seed)
    s, e = random_intervals(rng, 40)
    u = iv.merge(s, e)
    assert_union(u)
    np.testing.assert_array_equal(cells_of_union(u), cells(s, e))
    assert iv.total_length(u) == cells(s, e).sum()


def test_merge_touching_and_empty():
    u = iv.merge([0, 5, 5, 20, 30], [5, 10, 5, 20, 31])
    np.testing.assert_array_equal(u[0], [0, 30])
    np.testing.assert_array_equal(u[1], [10, 31])
    assert iv.total_length(iv.merge([], [])) == 0


@pytest.mark.parametrize("seed", SEEDS)
def test_set_operations_match_bruteforce(seed):
    rng = np.random.default_rng(seed)
    a = iv.merge(*random_intervals(rng, 30))
    b = iv.merge(*random_intervals(rng, 30))
    ca, cb = cells_of_union(a), cells_of_union(b)
    inter, diff, both = iv.intersect(a, b), iv.subtract(a, b), iv.union_of(a, b)
    for u in (inter, diff, both):
        assert_union(u)
    np.testing.assert_array_equal(cells_of_union(inter), ca & cb)
    np.testing.assert_array_equal(cells_of_union(diff), ca & ~cb)
    np.testing.assert_array_equal(cells_of_union(both), ca | cb)
    assert iv.intersection_length(a, b) == (ca & cb).sum()


@pytest.mark.parametrize("seed", SEEDS)
def test_sweep_masks_match_bruteforce(seed):
    rng = np.random.default_rng(seed)
    unions = [iv.merge(*random_intervals(rng, 20)) for _ in range(3)]
    s, e, m = iv.sweep(unions)
    expected = sum(cells_of_union(u).astype(int) << i for i, u in enumerate(unions))
    got = np.zeros_like(expected)
    for a, b, mask in zip(s, e, m):
        got[a:b] = mask
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("seed", SEEDS)
def test_covered_length_and_count_match_bruteforce(seed):
    rng = np.random.default_rng(seed)
    s, e = random_intervals(rng, 30)
    u = iv.merge(s, e)
    cu = cells_of_union(u)
    qs, qe = random_intervals(rng, 50)
    got = iv.covered_length(qs, qe, u)
    want = np.array([cu[a:b].sum() for a, b in zip(qs, qe)])
    np.testing.assert_array_equal(got, want)
    count = iv.count_overlapping(qs, qe, s, e)
    want_count = np.array([sum(1 for x, y in zip(s, e) if max(a, x) < min(b, y))
                           for a, b in zip(qs, qe)])
    np.testing.assert_array_equal(count, want_count)


# --------------------------------------------------------------------------------------------
# gemm_overlap


def make_dispatches(rows: list[tuple], extra: dict | None = None) -> pd.DataFrame:
    """rows: (kernel, start, end, pid, agent)."""
    df = pd.DataFrame(rows, columns=["kernel", "start_ns", "end_ns", "pid", "agent"])
    df["host"] = "h"
    df["point"] = "ch28-th256"
    df["dispatch_id"] = np.arange(1, len(df) + 1)
    for k, v in (extra or {}).items():
        df[k] = v
    return finalize_dispatches(df, "synthetic.json")


GEMMS = ["Cijk_Alik_Bljk_MT64", "Cijk_Ailk_Bljk_MT128"]
COLLS = ["ncclDevKernel_Generic_1", "ncclDevKernel_AllGather_RING"]


def random_table(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for kind, names in (("g", GEMMS), ("c", COLLS), ("o", ["vectorized_elementwise_kernel"])):
        s, e = random_intervals(rng, 25)
        for a, b in zip(s, e):
            rows.append((names[rng.integers(len(names))], a, b, int(rng.integers(1, 3)),
                         int(rng.integers(0, 2))))
    return make_dispatches(rows)


def brute_overlap(d: pd.DataFrame) -> pd.DataFrame:
    out = []
    for i, g in d[d["category"] == "gemm"].iterrows():
        same = d[(d["category"] == "collective") & (d["pid"] == g["pid"])
                 & (d["agent"] == g["agent"])]
        c = cells(same["start_ns"], same["end_ns"])
        ov = int(c[g["start_ns"]:g["end_ns"]].sum())
        hit = same[np.maximum(same["start_ns"], g["start_ns"])
                   < np.minimum(same["end_ns"], g["end_ns"])]
        out.append((i, ov, len(hit), ";".join(sorted(set(hit["kernel"].astype(str))))))
    return pd.DataFrame(out, columns=["idx", "overlap_ns", "count", "names"]).set_index("idx")


@pytest.mark.parametrize("seed", SEEDS)
def test_gemm_overlap_matches_bruteforce(seed):
    d = random_table(seed)
    got = gemm_overlap(d)
    want = brute_overlap(d)
    assert len(got) == (d["category"] == "gemm").sum()
    np.testing.assert_array_equal(got.index, want.index)
    np.testing.assert_array_equal(got["overlap_ns"], want["overlap_ns"])
    np.testing.assert_array_equal(got["overlapping_count"], want["count"])
    assert got["overlapping_collectives"].tolist() == want["names"].tolist()
    dur = got["dur_ns"].to_numpy()
    frac = got["overlap_fraction"].to_numpy()
    assert np.isnan(frac[dur == 0]).all()
    np.testing.assert_allclose(frac[dur > 0], (got["overlap_ns"] / got["dur_ns"])[dur > 0])


def test_concurrent_collectives_counted_once_and_gpus_separate():
    d = make_dispatches([
        ("Cijk_A", 0, 100, 1, 0),
        ("ncclDevKernel_Generic_1", 10, 50, 1, 0),
        ("ncclDevKernel_AllGather", 30, 70, 1, 0),
        ("ncclDevKernel_Generic_1", 0, 100, 1, 1),  # other GPU: must not count
        ("Cijk_A", 100, 120, 1, 0),  # touches the union's end only
    ])
    got = gemm_overlap(d).reset_index(drop=True)
    assert got.loc[0, "overlap_ns"] == 60
    assert got.loc[0, "overlap_fraction"] == pytest.approx(0.6)
    assert got.loc[0, "overlapping_count"] == 2
    assert got.loc[0, "overlapping_collectives"] == (
        "ncclDevKernel_AllGather;ncclDevKernel_Generic_1")
    assert got.loc[1, "overlap_ns"] == 0 and got.loc[1, "overlapping_collectives"] == ""


def test_overlap_by_kernel_interference():
    d = make_dispatches([
        ("Cijk_A", 0, 20, 1, 0), ("Cijk_A", 100, 130, 1, 0),  # overlapped
        ("Cijk_A", 200, 210, 1, 0), ("Cijk_A", 300, 310, 1, 0),  # isolated
        ("Cijk_B", 400, 410, 1, 0),
        ("ncclDevKernel_Generic_1", 0, 1, 1, 0), ("ncclDevKernel_Generic_1", 120, 150, 1, 0),
    ])
    out = overlap_by_kernel(d).set_index("kernel")
    a = out.loc["Cijk_A"]
    assert a["count"] == 4 and a["n_overlapped"] == 2
    assert a["median_dur_overlapped_ns"] == 25 and a["median_dur_isolated_ns"] == 10
    assert a["interference_slowdown"] == pytest.approx(2.5)
    assert a["mean_overlap_fraction"] == pytest.approx((1 / 20 + 10 / 30) / 4)
    assert np.isnan(out.loc["Cijk_B", "interference_slowdown"])
    # threshold: only the 1/3-overlapped dispatch counts as overlapped above 10 %
    high = overlap_by_kernel(d, threshold=0.1).set_index("kernel").loc["Cijk_A"]
    assert high["n_overlapped"] == 1 and high["median_dur_isolated_ns"] == 10


def test_explicit_masks_and_bad_mask():
    d = random_table(5)
    is_elem = (d["category"] == "elementwise").to_numpy()
    got = gemm_overlap(d, gemm_mask=is_elem)
    assert len(got) == is_elem.sum()
    with pytest.raises(ValueError, match="boolean array"):
        gemm_overlap(d, gemm_mask=np.ones(3, dtype=bool))


# --------------------------------------------------------------------------------------------
# real data: 908_results.json.gz (data-catalog.md §1.1)


def test_908_gemm_overlap_reference(trace_908):
    d = trace_908.dispatches
    ov = gemm_overlap(d)
    assert len(ov) == 5350
    assert int((ov["overlap_ns"] > 0).sum()) == 4519
    assert set(ov["overlapping_collectives"]) == {"", "ncclDevKernel_Generic_1"}
    s, e = d["start_ns"].to_numpy(), d["end_ns"].to_numpy()
    gemm = d["kernel"].astype(str).str.startswith("Cijk_").to_numpy()
    comm = d["kernel"].astype(str).str.contains("nccl|rccl", case=False).to_numpy()
    g_u, c_u = iv.merge(s[gemm], e[gemm]), iv.merge(s[comm], e[comm])
    assert iv.total_length(g_u) == 65_580_211
    assert iv.intersection_length(g_u, c_u) == 56_757_919
    assert iv.total_length(c_u) == 4_158_756_678
    rest = iv.merge(s[~comm], e[~comm])
    assert iv.total_length(rest) == 281_681_933
    assert iv.intersection_length(c_u, rest) == 207_326_277
    assert iv.total_length(iv.subtract(c_u, rest)) == 3_951_430_401
    assert iv.total_length(iv.merge(s, e)) == 4_233_112_334
    per_kernel = overlap_by_kernel(d, overlap=ov)
    assert per_kernel["count"].sum() == 5350
    assert per_kernel["n_overlapped"].sum() == 4519


@pytest.mark.parametrize("seed", range(4))
def test_small_overlap_by_kernel_matches_the_grouped_passes_bit_for_bit(seed, monkeypatch):
    """A small table's per-kernel overlap comes from one grouping (counts, sums and medians in
    NumPy): the same values as pandas' grouped passes, whatever the keys (categorical, nullable,
    missing; in any order or already sorted, where pandas sums another way), fractions (NaN,
    infinities, any magnitude) or threshold."""
    from pytest_gemmperf.analysis import overlap as O

    rng = np.random.default_rng(seed)
    cases = []
    for t in range(120):
        n = int(rng.integers(1, 60))
        dur = rng.integers(0, [10, 10**6, 2**40][t % 3], n).astype(np.int64)
        ovl = np.minimum(rng.integers(0, 10**6, n), dur).astype(np.int64) * (rng.random(n) < 0.6)
        frac = O.overlap_fraction(ovl, dur)
        if t % 5 == 0:
            frac = rng.random(n) * 10.0 ** rng.integers(-5, 5)
        if t % 11 == 0:
            frac[rng.integers(0, n)] = np.inf
        kern = rng.choice(np.array(["a", "b", "c", None], dtype=object), n)
        df = pd.DataFrame({"point": pd.Categorical(rng.choice(np.array(["p1", "p2", None], dtype=object), n)),
                           "rank": pd.array(rng.choice(np.array([0, 1, None], dtype=object), n), dtype="Int64"),
                           "kernel": pd.Categorical(kern) if t % 2 else pd.Series(kern, dtype=object),
                           "dur_ns": dur, "overlap_ns": ovl, "overlap_fraction": frac})
        by = [("point", "rank", "kernel"), ("kernel",), ("point", "kernel")][t % 3]
        if t % 4 == 1:  # rows already in group order, or one group: pandas' sorted-ids paths
            df = df.sort_values(list(by), kind="stable") if t % 8 == 1 else df.assign(kernel="a", point="p1", rank=0)
        cases.append((df, by, [0.0, 0.1][t % 2]))
    one_pass = [O.overlap_by_kernel(None, overlap=df, by=by, threshold=thr) for df, by, thr in cases]
    monkeypatch.setattr(O, "SMALL_TABLE_ROWS", 0)  # every table through pandas' grouped passes
    for (df, by, thr), got in zip(cases, one_pass):
        pd.testing.assert_frame_equal(got, O.overlap_by_kernel(None, overlap=df, by=by, threshold=thr),
                                      check_exact=True)

"""The canonical tables: coercion, validation, artefact flags, concatenation, names."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.traces.categories import category_of
from pytest_gemmperf.errors import GemmperfInputError
from pytest_gemmperf.traces import schema
from pytest_gemmperf.traces.schema import (DISPATCH_SCHEMA, concat_tables, finalize_dispatches,
                                           flag_queue_overlap, overlap_in_lanes, overlap_lane_by_lane,
                                           set_columns, short_name, validate_dispatches)


def _brute_force_flags(df: pd.DataFrame) -> np.ndarray:
    """O(n^2): a dispatch is flagged when an earlier-starting dispatch on its lane (same file,
    pid, agent and queue -- the stream when the queue is missing) is still running."""
    lane = [(f, p, a, ("q", q) if pd.notna(q) else ("s", s))
            for f, p, a, q, s in zip(df["file"], df["pid"], df["agent"], df["queue"], df["stream"])]
    order = sorted(range(len(df)), key=lambda i: (lane[i], df["start_ns"].iloc[i], i))
    out = np.zeros(len(df), dtype=bool)
    for k, i in enumerate(order):
        earlier = [j for j in order[:k] if lane[j] == lane[i]]
        if earlier and df["start_ns"].iloc[i] < max(df["end_ns"].iloc[j] for j in earlier):
            out[i] = True
    return out


@pytest.mark.parametrize("seed", range(8))
def test_queue_overlap_flags_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    n = 80
    start = rng.integers(0, 300, n)
    queue = pd.array(rng.integers(0, 3, n), dtype="Int64")
    queue[rng.random(n) < 0.25] = pd.NA  # torch-like rows fall back to their stream
    df = pd.DataFrame({
        "file": pd.Categorical(rng.choice(["a.csv", "b.csv"], n)),
        "pid": pd.array(rng.integers(0, 2, n), dtype="Int64"),
        "agent": pd.array(np.zeros(n, dtype=int), dtype="Int64"),
        "queue": queue, "stream": pd.array(rng.integers(0, 2, n), dtype="Int64"),
        "start_ns": start, "end_ns": start + rng.integers(0, 40, n),  # zero-length and nested
    })
    np.testing.assert_array_equal(flag_queue_overlap(df), _brute_force_flags(df))


@pytest.mark.parametrize("seed", range(12))
def test_lane_by_lane_flags_equal_the_whole_sort_in_blocks(seed, monkeypatch):
    """Each lane is flagged a block at a time in the order of its starts (the row order where
    they rise, else their stable sort) with the latest end carried across blocks: the
    whole-table sort's flags, with ties in start, nested and zero-length dispatches, an end
    carried over several blocks, rows out of order across a block boundary."""
    monkeypatch.setattr(schema, "_LANE_BLOCK", int(np.random.default_rng(seed).integers(1, 9)))
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(2, 400))
    gid = rng.integers(0, 1 + seed % 4, n).astype(np.int16)
    start = np.sort(rng.integers(0, 60 * n, n))  # rising in row order: the block path
    if seed % 3 == 0:  # some rows out of order: that lane is taken in its sorted order
        swap = rng.choice(n, size=min(n, 6), replace=False)
        start[swap] = start[swap[::-1]]
    dur = rng.integers(0, 200, n).astype(np.uint32)
    dur[rng.random(n) < 0.05] = 20 * n  # a long dispatch whose end covers later blocks
    want = overlap_in_lanes(gid.astype(np.int64), start, start + dur.astype(np.int64))
    np.testing.assert_array_equal(overlap_lane_by_lane(gid, start, dur=dur), want)
    np.testing.assert_array_equal(overlap_lane_by_lane(gid, start, start + dur.astype(np.int64)), want)


@pytest.mark.parametrize("descents", [0, 3])
def test_a_long_lane_is_flagged_in_a_blocks_memory(descents):
    """One lane of 2 M dispatches, in start order or with a few rows out of it: the flags cost
    the row index and the start order beyond the columns, not the whole sort's tens of bytes
    a row."""
    import tracemalloc

    n = 2_000_000
    start = np.arange(n, dtype=np.int64) * 10
    dur = np.full(n, 12, dtype=np.uint32)
    start[[1000, 500_000, 1_500_000][:descents]] -= 35
    gid = np.zeros(n, dtype=np.int8)
    want = overlap_in_lanes(gid, start, start + dur.astype(np.int64)) if descents else None
    tracemalloc.start()
    flags = overlap_lane_by_lane(gid, start, dur=dur)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    if want is None:
        assert flags[1:].all() and not flags[0]
    else:
        np.testing.assert_array_equal(flags, want)
    # the row index (8), its starts (8), the flags (1) and, out of order, the start order (8)
    assert peak < n * (20 if not descents else 30), f"{peak / n:.1f} bytes a row"


def test_finalize_keeps_and_flags_artefacts_and_rejects_negative_durations():
    df = pd.DataFrame({"kernel": ["a", "b", "c"], "start_ns": [0, 5, 30], "end_ns": [10, 5, 40],
                       "queue": [1, 1, 1]})
    out = finalize_dispatches(df, "t.csv")
    validate_dispatches(out)
    assert out["zero_dur"].tolist() == [False, True, False]
    assert out["queue_overlap"].tolist() == [False, True, False]
    assert out["file"].astype(str).tolist() == ["t.csv"] * 3
    bad = df.assign(end_ns=[10, 4, 40])
    with pytest.raises(GemmperfInputError, match=r"^t\.csv \(dispatch row 2\): 1 dispatch\(es\) end before"):
        finalize_dispatches(bad, "t.csv")
    with pytest.raises(GemmperfInputError, match=r"^e\.csv: no kernel dispatches found"):
        finalize_dispatches(df.iloc[:0], "e.csv")


def test_concat_keeps_categories_extras_and_all_null_columns():
    a = set_columns(finalize_dispatches(pd.DataFrame({"kernel": ["k1"], "start_ns": [0], "end_ns": [1]}), "a"),
                    point=None)
    b = finalize_dispatches(pd.DataFrame({"kernel": ["k2"], "start_ns": [0], "end_ns": [1],
                                          "coll_name": ["allreduce"]}), "b")
    b = set_columns(b, point="ch28-th256")
    out = concat_tables([a, b], DISPATCH_SCHEMA)
    validate_dispatches(out)
    assert out["point"].tolist()[1] == "ch28-th256" and pd.isna(out["point"].iloc[0])
    assert out["coll_name"].tolist()[1] == "allreduce" and pd.isna(out["coll_name"].iloc[0])
    assert out["kernel"].astype(str).tolist() == ["k1", "k2"]


@pytest.mark.parametrize("name, short", [
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
     "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
     "vectorized_elementwise_kernel"),
    ("ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)", "ncclDevKernel_Generic_1"),
    ("Cijk_Ailk_Bljk_BBS_BH_MT64x32x256_MI16x16x1.kd", "Cijk_Ailk_Bljk_BBS_BH_MT64x32x256_MI16x16x1"),
    ("(anonymous namespace)::softmax_warp_forward<float>(float*, int) [clone .kd]", "softmax_warp_forward"),
])
def test_short_names(name, short):
    assert short_name(name) == short


@pytest.mark.parametrize("name, category", [
    ("Cijk_Ailk_Bljk_BBS_BH_MT64x32x256", "gemm"),
    ("aten::mm", "gemm"),
    ("ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>)", "collective"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::direct_copy_kernel_cuda>", "elementwise"),
    ("__amd_rocclr_copyBuffer.kd", "memory"),
    ("void at::native::normal_kernel<float>(float*)", "other"),
    ("void layer_norm_fwd<float>(float*)", "normalization"),
    ("attn_fwd.kd", "attention"),
])
def test_default_categories(name, category):
    assert category_of(name) == category


# ----------------------------------------------------------------- category rules: linear time

#: the rules as written before they were made linear (issue 10): the rewrite must agree
_OLD_GEMM = (r"^Cijk_|gemm|matmul|hipblaslt|tensile|nvjet|xmma|cutlass|wmma|mfma|sgemm|hgemm|"
             r"igemm|ampere_.*_(s|h)\d+|sm\d+_xmma|ck_.*gemm|splitk|addmm|bmm|"
             r"^aten::(mm|addmm|bmm|baddbmm|matmul|linear|_scaled_mm)$")


def _old_category(name):
    import re

    from pytest_gemmperf.traces.categories import DEFAULT_RULES
    rules = [(c, _OLD_GEMM if c == "gemm" else rx) for c, rx in DEFAULT_RULES]
    return next((c for c, rx in rules if re.search(rx, name, re.IGNORECASE)), "other")


def test_rewritten_rules_agree_with_the_original_patterns():
    import random
    rng = random.Random(7)
    atoms = ["ampere_", "_s1", "_H22", "_x", "ck_", "gemm", "sm80", "_xmma", "norm", "al", "\n",
             "Cijk_", "aten::mm", "reduce", "MEMORY_COPY", "copyBuffer", "x", "_", "1"]
    names = ["".join(rng.choice(atoms) for _ in range(rng.randint(1, 8))) for _ in range(5000)]
    names += ["ampere_sgemm_128x64_nn", "ampere_h1688_x_s1", "ampere_\n_s1", "sm80_xmma_gemm",
              "ck_foo_GEMM", "void ck::kernel<x>", "AMPERE_foo_S12"]
    assert [category_of(n) for n in names] == [_old_category(n) for n in names]


@pytest.mark.parametrize("unit", ["ck_", "ampere_", "x", "aX_", "ampere_\n", "(s", "sm1", "all_",
                                  "norm", "Cijk_", "_su", "ampere_ampere__"])
def test_one_megabyte_kernel_name_is_categorised_in_linear_time(unit):
    """Issue 10: "ck_.*gemm" and "ampere_.*_(s|h)\\d+" backtracked quadratically (a 98 KB name
    took 11 s). 1 MB of any repeated unit must take well under a second."""
    import time
    name = unit * (1_000_000 // len(unit))
    t0 = time.perf_counter()
    category_of(name)
    assert time.perf_counter() - t0 < 1.0


def test_user_rules_keep_regex_semantics():
    from pytest_gemmperf.traces.categories import compile_rules, split_alternatives
    assert split_alternatives(r"a|b(c|d)|[|]|\||[]|]x|e") == ["a", "b(c|d)", "[|]", r"\|", "[]|]x", "e"]
    rules = compile_rules(extra=[("mine", r"Foo\d|BAR|[A-Z]{3}_only")])
    assert category_of("xfoo7", rules) == "mine"
    assert category_of("xbar", rules) == "mine"
    assert category_of("abc_only", rules) == "mine"
    assert category_of("foo", rules) == "other"
    assert category_of("Cijk_x", rules) == "gemm"


# ----------------------------------------------------------------- exact timestamps (issue 10)

@pytest.mark.parametrize("start, fragment", [
    ([1.0, 2.5], "2.5"), ([1.0, np.inf], "inf"), ([1.0, np.nan], "missing timestamp"),
    ([1.0, 2.0 ** 63], "int64 range"), (pd.Series([1, "7"], dtype=object), "'7'"),
    (pd.Series([1, 2 ** 63], dtype=object), "int64 range"),
])
def test_float_or_object_timestamps_must_be_exact_integers(start, fragment):
    df = pd.DataFrame({"kernel": ["k", "k"], "start_ns": start, "end_ns": [10, 20]})
    with pytest.raises(GemmperfInputError, match="dispatch row 2") as ei:
        finalize_dispatches(df, "t.parquet")
    assert fragment in str(ei.value)


def test_integral_float_timestamps_are_accepted_exactly():
    df = pd.DataFrame({"kernel": ["k"], "start_ns": [float(2 ** 62)], "end_ns": [2 ** 62 + 5]})
    out = finalize_dispatches(df, "t")
    assert out["start_ns"].tolist() == [2 ** 62] and out["dur_ns"].tolist() == [5]


def test_non_finite_counter_value_is_rejected():
    from pytest_gemmperf.traces.schema import finalize_counters
    with pytest.raises(GemmperfInputError, match=r"c\.csv \(counter row 2\): counter value inf"):
        finalize_counters(pd.DataFrame({"counter": ["A", "B"], "value": [1.0, np.inf]}), "c.csv")

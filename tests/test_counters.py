"""Counter passes joined to timing dispatches (ids restart per pass), derived metrics."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.analysis.counters import (
    counter_summary, invocation_index, join_counters, wide_counters,
)
from pytest_gemmperf.traces.schema import finalize_agents, finalize_counters, finalize_dispatches

KA = "Cijk_Ailk_Bljk_MT64x32"
KB = "Cijk_Alik_Bljk_MT128x128"
ORDER = [KA, KB, KA, KB, KA, KB]  # per pass; ids 1..6 in each


def timing() -> pd.DataFrame:
    """The kernel-trace run: another pid, other dispatch ids, a 4th call of KA."""
    names = ORDER + [KA]
    df = pd.DataFrame({"kernel": names, "start_ns": np.arange(7) * 100,
                       "end_ns": np.arange(7) * 100 + [10, 50, 12, 52, 14, 54, 16],
                       "dispatch_id": np.arange(11, 18), "pid": 500, "host": "h", "agent": 0})
    return finalize_dispatches(df, "timing/500_results.json")


def value(kernel: str, inv: int, base: float) -> float:
    return base * (inv + 1) * (1 if kernel == KA else 10)


def counters_table() -> pd.DataFrame:
    rows = []
    inv = {KA: 0, KB: 0}
    for did, k in enumerate(ORDER, start=1):
        i = inv[k]
        inv[k] += 1
        for ctr, v in (("SQ_WAVES", value(k, i, 10)), ("SQ_INSTS_VALU", value(k, i, 1000)),
                       ("GRBM_GUI_ACTIVE", 8000.0), ("SQ_WAVE_CYCLES", value(k, i, 10) * 50)):
            rows.append((1, 601, did, k, ctr, v))
        mfma = value(k, i, 7)
        for ctr, v in (("SQ_BUSY_CU_CYCLES", 16000.0), ("SQ_BUSY_CU_CYCLES", 16000.0),  # 2 dims
                       ("GRBM_GUI_ACTIVE", 99.0),  # also in pass 1: the first pass wins
                       ("SQ_INSTS_VALU_MFMA_MOPS_F16", mfma),
                       ("SQ_INSTS_VALU_MFMA_MOPS_BF16", 1.0)):
            rows.append((2, 602, did, k, ctr, v))
    df = pd.DataFrame(rows, columns=["pass", "pid", "dispatch_id", "kernel", "counter", "value"])
    df = df.iloc[np.random.default_rng(0).permutation(len(df))]  # record order is not call order
    df["host"] = "h"
    df["agent"] = 0
    df["file"] = ("pmc_" + df["pass"].astype(str) + "/" + df["pid"].astype(str)
                  + "_counter_collection.csv")
    return finalize_counters(df, None)


def agents() -> pd.DataFrame:
    return finalize_agents(pd.DataFrame({
        "host": ["h", "h"], "type": ["CPU", "GPU"], "gpu_index": [pd.NA, 0],
        "cu_count": [0, 256], "xcc_count": [pd.NA, 8]}), "agent_info.csv")


def test_wide_counters_pivots_and_sums_dimensions():
    wide = wide_counters(counters_table())
    assert len(wide) == 12  # 6 dispatches x 2 passes
    p2 = wide[wide["pass"] == 2].sort_values("dispatch_id")
    assert (p2["SQ_BUSY_CU_CYCLES"] == 32000.0).all()
    assert p2["SQ_WAVES"].isna().all()
    p1 = wide[wide["pass"] == 1].sort_values("dispatch_id")
    assert p1["SQ_WAVES"].tolist() == [10, 100, 20, 200, 30, 300]
    assert p1["kernel"].astype(str).tolist() == ORDER


def test_invocation_index_restarts_per_pass_and_kernel():
    wide = wide_counters(counters_table()).sort_values(["pass", "dispatch_id"])
    assert invocation_index(wide).tolist() == [0, 0, 1, 1, 2, 2] * 2


def test_join_counters_matches_by_invocation_and_derives():
    joined = join_counters(timing(), counters_table(), agents=agents())
    assert len(joined) == 7
    a = joined[joined["kernel"] == KA].sort_values("start_ns")
    b = joined[joined["kernel"] == KB].sort_values("start_ns")
    assert a["SQ_WAVES"].tolist()[:3] == [10, 20, 30]
    assert b["SQ_WAVES"].tolist() == [100, 200, 300]
    assert a["counter_passes"].tolist() == [2, 2, 2, 0]
    assert np.isnan(a["SQ_WAVES"].iloc[3]) and np.isnan(a["cu_utilization"].iloc[3])
    assert (joined["GRBM_GUI_ACTIVE"].dropna() == 8000.0).all()
    # 4 * 32000 / (8000 / 8 XCDs) = 128 active CUs of 256
    np.testing.assert_allclose(a["active_cus"].iloc[:3], 128.0)
    np.testing.assert_allclose(a["cu_utilization"].iloc[:3], 0.5)
    assert a["mfma_insts"].tolist()[:3] == [8.0, 15.0, 22.0]
    assert b["valu_insts"].tolist() == [10000.0, 20000.0, 30000.0]
    assert a["waves"].tolist()[:3] == [10, 20, 30]
    np.testing.assert_allclose(a["wave_cycles_per_wave"].iloc[:3], 50.0)
    assert joined["dur_ns"].tolist() == timing()["dur_ns"].tolist()  # timing kept


def test_join_without_agents_leaves_utilization_unknown():
    joined = join_counters(timing(), counters_table())
    assert joined["cu_utilization"].isna().all()
    assert joined["waves"].notna().sum() == 6


def test_other_process_identity_does_not_match():
    t = timing()
    t["agent"] = pd.array([1] * len(t), dtype="Int64")  # timing run on another GPU
    joined = join_counters(t, counters_table(), agents=agents())
    assert (joined["counter_passes"] == 0).all()
    assert joined["SQ_WAVES"].isna().all()


def test_counter_summary_medians():
    joined = join_counters(timing(), counters_table(), agents=agents())
    summ = counter_summary(joined, by=("kernel",)).set_index("kernel")
    assert summ.loc[KA, "count"] == 4 and summ.loc[KA, "n_with_counters"] == 3
    assert summ.loc[KA, "SQ_WAVES"] == 20
    assert summ.loc[KB, "valu_insts"] == 20000
    assert summ.loc[KA, "cu_utilization"] == pytest.approx(0.5)
    assert summ.loc[KA, "dur_ns"] == pytest.approx(13.0)  # 10, 12, 14, 16


def test_empty_counters():
    joined = join_counters(timing(), finalize_counters(pd.DataFrame(), None))
    assert (joined["counter_passes"] == 0).all()
    assert joined["mfma_insts"].isna().all()

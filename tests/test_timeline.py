"""GPU timeline (TraceLens PyTorch and rocprof modes) against brute force and the 908 file."""

from __future__ import annotations

import csv

import numpy as np
import pandas as pd
import pytest

from pytest_gemmperf.analysis.timeline import (
    COMM, COMP, MEMCPY, gpu_timeline, rocprof_timeline, timeline_classes, timeline_ms,
    tracelens_sheet,
)
from pytest_gemmperf.traces.schema import finalize_dispatches

from test_overlap import SEEDS, cells, random_intervals  # the same brute-force fixtures

NAMES = ["Cijk_Alik_Bljk_MT64", "ncclDevKernel_Generic_1", "__amd_rocclr_copyBuffer",
         "__amd_rocclr_fillBufferAligned", "cross_device_reduce_1stage", "RCCL_AllReduce",
         "vectorized_elementwise_kernel"]
CLASS_OF = {0: COMP, 1: COMM, 2: MEMCPY, 3: COMP, 4: COMM, 5: COMM, 6: COMP}


def random_table(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    s, e = random_intervals(rng, 60)
    k = rng.integers(0, len(NAMES), len(s))
    df = pd.DataFrame({"kernel": [NAMES[i] for i in k], "start_ns": s, "end_ns": e,
                       "pid": rng.integers(1, 3, len(s)), "agent": rng.integers(0, 2, len(s)),
                       "host": "h"})
    return finalize_dispatches(df, "synthetic.json")


def brute_timeline(d: pd.DataFrame) -> dict[tuple, dict[str, int]]:
    out = {}
    for (pid, agent), g in d.groupby(["pid", "agent"]):
        cls = np.array([CLASS_OF[NAMES.index(n)] for n in g["kernel"].astype(str)])
        s, e = g["start_ns"].to_numpy(), g["end_ns"].to_numpy()
        comp = cells(s[cls == COMP], e[cls == COMP])
        comm = cells(s[cls == COMM], e[cls == COMM])
        mem = cells(s[cls == MEMCPY], e[cls == MEMCPY])
        total = int(e.max() - s.min())
        busy = int((comp | comm | mem).sum())
        out[(pid, agent)] = {
            "computation_time_ns": int(comp.sum()),
            "total_comm_time_ns": int(comm.sum()),
            "exposed_comm_time_ns": int((comm & ~comp).sum()),
            "total_memcpy_time_ns": int(mem.sum()),
            "exposed_memcpy_time_ns": int((mem & ~comp & ~comm).sum()),
            "busy_time_ns": busy,
            "total_time_ns": total,
            "idle_time_ns": total - busy,
        }
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_gpu_timeline_matches_bruteforce_and_invariant(seed):
    d = random_table(seed)
    tl = gpu_timeline(d)
    want = brute_timeline(d)
    assert len(tl) == len(want)
    for _, row in tl.iterrows():
        ref = want[(row["pid"], row["agent"])]
        for col, value in ref.items():
            assert row[col] == value, col
        assert (row["computation_time_ns"] + row["exposed_comm_time_ns"]
                + row["exposed_memcpy_time_ns"] + row["idle_time_ns"]) == row["total_time_ns"]
    assert tl["n_dispatches"].sum() == len(d)


def test_classes_follow_tracelens_rules():
    d = finalize_dispatches(pd.DataFrame({
        "kernel": NAMES + ["Memcpy DtoD (Device -> Device)", "Memset (Device)"],
        "start_ns": 0, "end_ns": 1}), "x.json")
    cls = timeline_classes(d)
    assert cls.tolist() == [CLASS_OF[i] for i in range(len(NAMES))] + [MEMCPY, COMP]
    d["torch_cat"] = ["gpu_memcpy"] + [None] * (len(d) - 1)
    assert timeline_classes(d)[0] == MEMCPY
    forced = timeline_classes(d, memcpy_mask=np.r_[np.zeros(len(d) - 1, bool), True])
    assert forced[-1] == MEMCPY


def test_rocprof_timeline_lifetime_and_memory_copies():
    d = finalize_dispatches(pd.DataFrame({
        "kernel": ["Cijk_A", "ncclDevKernel_Generic_1"], "start_ns": [100, 150],
        "end_ns": [200, 300], "pid": 7, "agent": 0}), "x.json")
    copies = pd.DataFrame({"start_ns": [250, 400], "end_ns": [350, 450]})
    tl = rocprof_timeline(d, init_ns=0, fini_ns=1000, memory_copies=copies).iloc[0]
    assert tl["total_time_ns"] == 1000
    assert tl["kernel_time_ns"] == 200
    assert tl["memory_time_ns"] == 150
    assert tl["busy_time_ns"] == 300  # [100, 350) + [400, 450)
    assert tl["idle_time_ns"] == 700
    assert tl["n_dispatches"] == 2
    no_life = rocprof_timeline(d).iloc[0]
    assert no_life["total_time_ns"] == 200 and no_life["memory_time_ns"] == 0
    with pytest.raises(ValueError, match="fini_ns"):
        rocprof_timeline(d, init_ns=10, fini_ns=5)


def test_ms_view_and_sheet():
    d = random_table(3)
    tl = gpu_timeline(d)
    ms = timeline_ms(tl)
    assert "computation_time_ms" in ms.columns and "computation_time_ns" not in ms.columns
    assert ms["total_time_ms"].iloc[0] == pytest.approx(tl["total_time_ns"].iloc[0] / 1e6)
    sheet = tracelens_sheet(tl.iloc[0])
    assert sheet["type"].tolist() == ["computation_time", "exposed_comm_time",
                                      "exposed_memcpy_time", "busy_time", "idle_time",
                                      "total_time", "total_comm_time", "total_memcpy_time"]
    assert sheet.set_index("type").loc["total_time", "percent"] == pytest.approx(100.0)


# --------------------------------------------------------------------------------------------
# real data


def test_908_pytorch_mode_reference(trace_908):
    tl = gpu_timeline(trace_908.dispatches)
    assert len(tl) == 1
    row = tl.iloc[0]
    assert row["computation_time_ns"] == 271_636_292
    assert row["exposed_comm_time_ns"] == 3_954_440_680
    assert row["exposed_memcpy_time_ns"] == 7_035_362
    assert row["total_time_ns"] == 15_122_023_494
    assert row["idle_time_ns"] == 10_888_911_160
    assert row["busy_time_ns"] == 4_233_112_334
    assert row["total_comm_time_ns"] == 4_158_756_678
    assert (row["computation_time_ns"] + row["exposed_comm_time_ns"]
            + row["exposed_memcpy_time_ns"] + row["idle_time_ns"]) == row["total_time_ns"]


def test_908_rocprof_mode_matches_tracelens_csv(trace_908, shared_data):
    ref_path = shared_data / "tracelens" / "908_tracelens_csvs_generated" / "gpu_timeline.csv"
    if not ref_path.exists():
        pytest.skip(f"real-data test: {ref_path} is absent")
    with open(ref_path, newline="") as fh:
        ref = {r["type"]: (float(r["time ms"]), float(r["percent"])) for r in csv.DictReader(fh)}
    proc = trace_908.meta["processes"][0]
    tl = rocprof_timeline(trace_908.dispatches, proc["init_time_ns"], proc["fini_time_ns"])
    sheet = tracelens_sheet(tl.iloc[0], mode="rocprof").set_index("type")
    assert list(sheet.index) == list(ref)
    for typ, (ms, pct) in ref.items():
        assert sheet.loc[typ, "time ms"] == pytest.approx(ms, abs=1e-6), typ
        assert sheet.loc[typ, "percent"] == pytest.approx(pct, abs=1e-6), typ
    assert tl.iloc[0]["total_time_ns"] == 19_207_532_470
